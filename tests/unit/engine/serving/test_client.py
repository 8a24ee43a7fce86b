"""engine.serving.client, the gateway's HTTP/1.1 to its engines, against a scripted server on loopback.

The happy path against the real engine server lives in tests/unit/engine/serving/test_protocol.py;
these tests pin what a real server does less often: answers split at any byte, trailers, a
connection closed while idle, ``connection: close``, silence past the read timeout, an engine
that speaks an older protocol.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest

from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, PromptTooLongError
from engine.serving.client import EngineClient
from engine.serving.frames import encode_frame
from engine.serving.protocol import FRAMES_MEDIA_TYPE, DeltaEvent, ErrorEvent, GenerateRequest

pytestmark = pytest.mark.anyio

Respond = Callable[[asyncio.StreamWriter, int], Awaitable[None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ScriptedEngine:
    """Reads each request (head and content-length body) and lets ``respond`` write the answer."""

    def __init__(self, respond: Respond) -> None:
        self._respond = respond
        self.num_connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.num_connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":")[1])
                self.requests.append(head + await reader.readexactly(length))
                await self._respond(writer, len(self.requests))
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


Start = Callable[[Respond], Awaitable[tuple[ScriptedEngine, str]]]


@pytest.fixture
async def scripted() -> AsyncIterator[Start]:
    engines: list[ScriptedEngine] = []

    async def start(respond: Respond) -> tuple[ScriptedEngine, str]:
        engine = ScriptedEngine(respond)
        engines.append(engine)
        return engine, await engine.start()

    yield start
    for engine in engines:
        await engine.stop()


def request(max_tokens: int = 2) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        model="demo-chat",
        prompt="hi",
        params=SamplingParams(max_tokens=max_tokens),
    )


def delta(text: str, num_output_tokens: int, index: int = 0) -> StreamDelta:
    return StreamDelta(
        index=index,
        text=text,
        token_ids=[1],
        finish_reason=None,
        num_prompt_tokens=1,
        num_output_tokens=num_output_tokens,
    )


def frames(*texts: str) -> bytes:
    """One frame per text, as the engine sends them."""
    return b"".join(encode_frame([delta(t, i + 1)]) for i, t in enumerate(texts))


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces)
    return framed + b"0\r\nx-trailer: yes\r\n\r\n"


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-type: %s\r\n\r\n" % (
    FRAMES_MEDIA_TYPE.encode()
)


async def texts_of(client: EngineClient) -> list[str]:
    async with client.generate(request()) as stream:
        return [event.text async for frame in stream for event in frame]


async def test_an_answer_split_at_any_byte_gives_whole_events(scripted: Start) -> None:
    answer = STREAM_HEAD + chunked(frames(" hello", " wörld", " again"), size=7)

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        for i in range(0, len(answer), 5):
            writer.write(answer[i : i + 5])
            await writer.drain()
            await asyncio.sleep(0.001)

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    assert await texts_of(client) == [" hello", " wörld", " again"]
    assert await texts_of(client) == [" hello", " wörld", " again"]
    assert engine.num_connections == 1, "a fully read answer leaves its connection in the pool"
    assert engine.requests[0].startswith(b"POST /engine/v1/generate HTTP/1.1\r\n")
    assert b"authorization: Bearer t\r\n" in engine.requests[0]
    await client.aclose()


async def test_a_connection_the_engine_closed_while_idle_is_replaced(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(STREAM_HEAD + chunked(frames(" ok"), size=64))
        await writer.drain()
        writer.close()  # as an idle keep-alive timeout would, without saying so in a header

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    for pause_s in (0.05, 0.05, 0.0, 0.0, 0.0):  # noticed while idle, or only when reused
        assert await texts_of(client) == [" ok"]
        await asyncio.sleep(pause_s)
    assert engine.num_connections == 5
    assert len(engine.requests) == 5, "no request was sent twice"
    await client.aclose()


async def test_connection_close_and_content_length_answers(scripted: Start) -> None:
    body = b'{"instance_id":"e1","models":[]}'

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    assert (await client.info()).instance_id == "e1"
    assert (await client.info()).instance_id == "e1"
    assert engine.num_connections == 2
    await client.aclose()


async def test_an_engine_silent_past_the_read_timeout_is_unavailable(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(STREAM_HEAD + chunked(frames(" first"), size=64)[:-5])  # then nothing more
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t", read_timeout_s=0.2)
    started = time.monotonic()
    got: list[str] = []
    with pytest.raises(EngineUnavailableError, match="TimeoutError"):
        async with client.generate(request()) as stream:
            async for frame in stream:
                got += [event.text for event in frame]
    assert got == [" first"]
    assert 0.2 <= time.monotonic() - started < 2
    assert len(engine.requests) == 1
    await client.aclose()


async def test_an_answer_cut_off_midway_is_unavailable_and_not_resent(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, num: int) -> None:
        if num == 1:
            writer.write(STREAM_HEAD + chunked(frames(" ok"), size=64))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-")
            writer.close()
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    assert await texts_of(client) == [" ok"]
    with pytest.raises(EngineUnavailableError):
        await texts_of(client)
    assert len(engine.requests) == 2
    await client.aclose()


def test_urls_and_tokens_that_cannot_be_sent_are_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        EngineClient("ftp://engine:21", "t")
    with pytest.raises(ValueError, match="line breaks"):
        EngineClient("http://engine:8100", "t\r\nx-injected: 1")


async def test_a_frame_carries_every_completion_of_a_step_and_an_error_frame_raises(scripted: Start) -> None:
    step = encode_frame([delta(" a", 1, index=0), delta(" b", 1, index=1)])
    error = encode_frame(ErrorEvent(code=PromptTooLongError.code, message="too long", param="messages"))

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(STREAM_HEAD + chunked(step + error, size=3))
        await writer.drain()

    _, url = await scripted(respond)
    client = EngineClient(url, "t")
    got: list[list[DeltaEvent]] = []
    with pytest.raises(PromptTooLongError, match="too long"):
        async with client.generate(request()) as stream:
            async for frame in stream:
                got.append(frame)
    assert [[(e.index, e.text) for e in frame] for frame in got] == [[(0, " a"), (1, " b")]]
    await client.aclose()


async def test_an_engine_speaking_the_ndjson_protocol_is_unavailable_not_misread(scripted: Start) -> None:
    line = msgspec.json.encode(DeltaEvent(index=0, text=" old", token_ids=[1])) + b"\n"

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n"
        writer.write(head + chunked(line, size=64))
        await writer.drain()

    _, url = await scripted(respond)
    client = EngineClient(url, "t")
    with pytest.raises(EngineUnavailableError, match="version 2"):
        await texts_of(client)
    await client.aclose()


async def test_a_stream_cut_inside_a_frame_is_unavailable(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(STREAM_HEAD + chunked(frames(" whole") + frames(" cut")[:-2], size=64))
        await writer.drain()

    _, url = await scripted(respond)
    client = EngineClient(url, "t")
    got: list[str] = []
    with pytest.raises(EngineUnavailableError, match="inside a frame"):
        async with client.generate(request()) as stream:
            async for frame in stream:
                got += [event.text for event in frame]
    assert got == [" whole"]
    await client.aclose()
