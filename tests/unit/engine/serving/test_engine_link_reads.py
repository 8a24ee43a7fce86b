"""engine.serving.engine_link, one socket read at a time: the bytes of each read are chosen here.

The link is driven through its ``asyncio.Protocol`` methods with a recording transport, and the
engine's side of the WebSocket is websockets' own sans-I/O ``ServerProtocol``, so a test decides
exactly which messages (fragmented or not, with control frames between them) land in one read.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol

from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, RequestAbortedError
from engine.serving.engine_link import EngineLink, LinkStream, _array_of
from engine.serving.protocol import DeltaEvent, ErrorEvent, GenerateRequest, LinkAbort, LinkOpen

pytestmark = pytest.mark.anyio
_link_decoder = msgspec.msgpack.Decoder(LinkOpen | LinkAbort)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Transport:
    """What the link writes, and whether it closed the socket."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.is_aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.is_aborted = True

    def close(self) -> None:
        self.is_aborted = True


class Engine:
    """The engine's end of one link, handshake done: frames in, bytes for the link out."""

    def __init__(self, max_stream_bytes: int = 1 << 20) -> None:
        self.link = EngineLink("http://engine", "t", read_timeout_s=5, max_stream_bytes=max_stream_bytes)
        self.transport = Transport()
        self.server = ServerProtocol()
        self.link.connection_made(self.transport)  # type: ignore[arg-type]
        self.server.receive_data(self._take_written())
        [handshake] = self.server.events_received()
        self.server.send_response(self.server.accept(handshake))  # type: ignore[arg-type]
        self.link.data_received(self.out())
        assert self.link.is_open

    def _take_written(self) -> bytes:
        data, self.transport.written = b"".join(self.transport.written), []
        return data

    def out(self) -> bytes:
        """Everything the engine has sent since the last call, as one read for the link."""
        return b"".join(self.server.data_to_send())

    def from_link(self) -> list[Any]:
        """The link messages the gateway sent since the last call."""
        self.server.receive_data(self._take_written())
        return [
            _link_decoder.decode(frame.data)
            for frame in self.server.events_received()
            if isinstance(frame, Frame) and frame.opcode is Opcode.BINARY
        ]

    def step(self, entries: list[tuple[int, Any]]) -> None:
        """One engine message: ``[[stream, frame], ...]``."""
        self.server.send_binary(msgspec.msgpack.encode([list(entry) for entry in entries]))


def request(n: int = 1) -> GenerateRequest:
    return GenerateRequest(request_id="r", model="m", prompt="hi", params=SamplingParams(max_tokens=8, n=n))


def delta(text: str, index: int = 0, finish: str | None = None) -> StreamDelta:
    return StreamDelta(
        index=index,
        text=text,
        token_ids=[len(text)],
        finish_reason=finish,
        num_prompt_tokens=1,
        num_output_tokens=1,
    )


async def take(stream: LinkStream) -> list[list[DeltaEvent]]:
    return [frame async for frame in stream.frames()]


@pytest.mark.parametrize("num_steps", [1, 15, 16, 300])
async def test_a_backlog_landing_in_one_read_reaches_the_reader_as_one_merged_frame(num_steps: int) -> None:
    engine = Engine()
    stream = engine.link.open(request())
    other = engine.link.open(request())
    for i in range(num_steps):
        engine.step([(stream.sid, [delta(f"t{i} ")]), (other.sid, [delta("o")])])
    engine.step([(stream.sid, [delta("end", finish="stop")])])
    engine.link.data_received(engine.out())
    [frame] = await take(stream)
    [event] = frame
    assert event.text == "".join(f"t{i} " for i in range(num_steps)) + "end"
    assert event.token_ids == [len(f"t{i} ") for i in range(num_steps)] + [3]
    assert event.finish_reason == "stop"
    assert [len(other.pending)] == [num_steps], "the other stream's frames wait for its own reader"


async def test_a_read_holding_fragments_and_control_frames_dispatches_whole_messages() -> None:
    engine = Engine()
    stream = engine.link.open(request(n=2))
    message = msgspec.msgpack.encode([[stream.sid, [delta("a", 0), delta("b", 1)]]])
    engine.server.send_binary(message[:3], fin=False)
    engine.server.send_ping(b"p")
    engine.server.send_continuation(message[3:7], fin=False)
    first_read = engine.out()
    engine.server.send_continuation(message[7:], fin=True)
    engine.step([(stream.sid, [delta("c", 0, "stop"), delta("d", 1, "length")])])
    engine.link.data_received(first_read)
    assert stream.pending == [], "nothing reaches a stream before its message is whole"
    engine.link.data_received(engine.out())
    [frame] = await take(stream)
    assert [(e.index, e.text, e.finish_reason) for e in frame] == [(0, "ac", "stop"), (1, "bd", "length")]
    engine.server.receive_data(b"".join(engine.transport.written))
    pongs = [e for e in engine.server.events_received() if isinstance(e, Frame) and e.opcode is Opcode.PONG]
    assert [pong.data for pong in pongs] == [b"p"], "the ping in the middle of a message was answered"


async def test_frames_before_an_error_in_one_read_are_handed_over_before_it() -> None:
    engine = Engine()
    stream = engine.link.open(request())
    engine.step([(stream.sid, [delta("a")])])
    engine.step([(stream.sid, [delta("b")])])
    engine.step([(stream.sid, ErrorEvent(code="engine_overloaded", message="full"))])
    engine.link.data_received(engine.out())
    frames = stream.frames()
    [event] = await anext(frames)
    assert event.text == "ab"
    with pytest.raises(Exception, match="full") as caught:
        await anext(frames)
    assert type(caught.value).__name__ == "EngineOverloadedError"


async def test_a_garbled_frame_in_a_backlog_fails_the_whole_link() -> None:
    engine = Engine()
    stream = engine.link.open(request())
    bystander = engine.link.open(request())
    engine.step([(stream.sid, [delta("a")])])
    engine.server.send_binary(msgspec.msgpack.encode([[stream.sid, msgspec.msgpack.Ext(1, b"x")]]))
    engine.link.data_received(engine.out())
    with pytest.raises(EngineUnavailableError, match="unreadable frame"):
        await take(stream)
    assert not engine.link.is_open
    with pytest.raises(EngineUnavailableError):
        await take(bystander)


async def test_a_stream_past_its_bound_in_one_read_fails_and_is_aborted_alone() -> None:
    engine = Engine(max_stream_bytes=1000)
    slow = engine.link.open(request())
    fine = engine.link.open(request())
    for _ in range(5):  # each of slow's frames holds 200 characters, each of fine's about 100 bytes
        engine.step([(slow.sid, [delta("x" * 200)]), (fine.sid, [delta("y")])])
    engine.step([(fine.sid, [delta("z", finish="stop")])])
    engine.link.data_received(engine.out())
    with pytest.raises(RequestAbortedError, match="1000 bytes behind"):
        await take(slow)
    assert [LinkAbort(stream=slow.sid)] == [m for m in engine.from_link() if isinstance(m, LinkAbort)]
    [[event]] = await take(fine)
    assert event.text == "y" * 5 + "z"
    assert engine.link.is_open and engine.link.num_streams == 1  # ``fine``, until its reader closes it
    engine.step([(slow.sid, [delta("late")])])
    engine.link.data_received(engine.out())
    assert slow.pending == [], "a late frame of an aborted stream is dropped"


async def test_the_messages_of_one_turn_of_the_loop_leave_in_one_write() -> None:
    engine = Engine()
    first, second = engine.link.open(request()), engine.link.open(request())
    assert engine.transport.written == []
    await asyncio.sleep(0)
    assert len(engine.transport.written) == 1
    assert [m.stream for m in engine.from_link()] == [first.sid, second.sid]


async def test_an_abort_leaves_at_once() -> None:
    engine = Engine()
    stream = engine.link.open(request())
    await asyncio.sleep(0)
    engine.from_link()
    engine.link.close_stream(stream)
    assert engine.from_link() == [LinkAbort(stream=stream.sid)]


async def test_one_timer_serves_every_wait_of_a_stream_and_still_times_a_silent_engine_out() -> None:
    engine = Engine()
    stream = engine.link.open(request())
    frames = stream.frames()
    for word in ("a", "b", "c"):
        reader = asyncio.ensure_future(anext(frames))
        await asyncio.sleep(0)
        if word == "a":
            timer = stream._timer
            assert timer is not None
        assert stream._timer is timer, "no new timer per wait"
        engine.step([(stream.sid, [delta(word)])])
        engine.link.data_received(engine.out())
        assert [e.text for e in await reader] == [word]
    reader = asyncio.ensure_future(anext(frames))
    await asyncio.sleep(0)
    stream._on_timer()  # fired early: this wait began later, so its deadline is still ahead
    assert not reader.done() and stream._timer is not None and stream._timer is not timer
    stream._deadline = 0.0  # now past it, with nothing from the engine
    stream._on_timer()
    with pytest.raises(EngineUnavailableError, match="TimeoutError"):
        await reader
    engine.link.close_stream(stream)
    assert stream._timer is None


async def test_a_reader_waiting_on_an_empty_stream_wakes_for_the_next_read() -> None:
    engine = Engine()
    stream = engine.link.open(request())
    reader = asyncio.ensure_future(take(stream))
    await asyncio.sleep(0)
    engine.step([(stream.sid, [delta("a")])])
    engine.link.data_received(engine.out())
    await asyncio.sleep(0)
    engine.step([(stream.sid, [delta("b", finish="stop")])])
    engine.link.data_received(engine.out())
    frames = await asyncio.wait_for(reader, 5)
    assert "".join(e.text for frame in frames for e in frame) == "ab"


@pytest.mark.parametrize("count", [0, 15, 16, (1 << 16) - 1, 1 << 16, 70_000])
def test_a_backlog_joins_into_one_msgpack_array_whatever_its_length(count: int) -> None:
    raws = [msgspec.Raw(msgspec.msgpack.encode(i)) for i in range(count)]
    assert msgspec.msgpack.decode(_array_of(raws)) == list(range(count))
