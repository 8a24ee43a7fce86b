"""engine.serving.engine_link and link_session: many generations over one WebSocket per engine.

Against the real engine server (stub backend) where the engine's behaviour matters (aborts, one
connection, backpressure), and against a scripted WebSocket server (the websockets library's own)
where the test must choose the bytes: interleaved and garbled messages, a link cut mid-stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from websockets.asyncio.server import ServerConnection, serve

from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, RequestAbortedError
from engine.serving.client import EngineClient
from engine.serving.link_session import LinkSession
from engine.serving.protocol import ErrorEvent, GenerateRequest, LinkAbort, LinkOpen
from engine.serving.stub_engine import StubEngine
from tests.stub_engine_server import engine_server

pytestmark = pytest.mark.anyio
TOKEN = "link-test-token"
_open_decoder = msgspec.msgpack.Decoder(LinkOpen | LinkAbort)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(max_tokens: int, n: int = 1) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        model="demo-chat",
        prompt="hi",
        params=SamplingParams(max_tokens=max_tokens, n=n),
    )


def delta(text: str, finish: str | None = None, index: int = 0) -> StreamDelta:
    return StreamDelta(
        index=index, text=text, token_ids=[1], finish_reason=finish, num_prompt_tokens=1, num_output_tokens=1
    )


async def read_all(client: EngineClient, req: GenerateRequest) -> str:
    async with client.generate(req) as frames:
        return "".join([event.text async for frame in frames for event in frame])


Script = Callable[[ServerConnection, int], Awaitable[None]]


async def scripted(script: Script) -> tuple[Any, str]:
    """A WebSocket server running ``script(connection, nth connection)``; returns it and its URL."""
    num = 0

    async def handler(connection: ServerConnection) -> None:
        nonlocal num
        num += 1
        await script(connection, num)

    server = await serve(handler, "127.0.0.1", 0)
    port = next(iter(server.sockets)).getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def opens(connection: ServerConnection, count: int) -> list[LinkOpen]:
    got = []
    while len(got) < count:
        message = _open_decoder.decode(await connection.recv())
        assert isinstance(message, LinkOpen)
        got.append(message)
    return got


async def test_interleaved_frames_each_reach_their_own_stream() -> None:
    async def script(connection: ServerConnection, _: int) -> None:
        a, b, c = (o.stream for o in await opens(connection, 3))
        await connection.send(
            msgspec.msgpack.encode([[c, [delta("c1")]], [a, [delta("a1")]], [b, [delta("b1")]]])
        )
        await connection.send(
            msgspec.msgpack.encode([[a, [delta("a2", "stop")]], [c, [delta("c2", "length")]]])
        )
        await connection.send(
            msgspec.msgpack.encode([[b, ErrorEvent(code="engine_overloaded", message="full")]])
        )
        await connection.wait_closed()

    server, url = await scripted(script)
    client = EngineClient(url, TOKEN)
    results = await asyncio.gather(
        read_all(client, request(2)),
        read_all(client, request(2)),
        read_all(client, request(2)),
        return_exceptions=True,
    )
    assert results[0] == "a1a2" and results[2] == "c1c2"
    assert type(results[1]).__name__ == "EngineOverloadedError"
    await client.aclose()
    server.close()


async def test_a_link_cut_mid_stream_fails_every_stream_at_once_and_the_next_call_reconnects() -> None:
    async def script(connection: ServerConnection, num: int) -> None:
        if num == 1:
            streams = [o.stream for o in await opens(connection, 3)]
            await connection.send(msgspec.msgpack.encode([[s, [delta("x")]] for s in streams]))
            await asyncio.sleep(0.05)
            connection.transport.abort()  # the engine process died: no close frame
            return
        [only] = await opens(connection, 1)
        await connection.send(msgspec.msgpack.encode([[only.stream, [delta("again", "stop")]]]))
        await connection.wait_closed()

    server, url = await scripted(script)
    client = EngineClient(url, TOKEN, read_timeout_s=60)
    started = time.monotonic()
    results = await asyncio.gather(*(read_all(client, request(50)) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, EngineUnavailableError) for r in results), results
    assert time.monotonic() - started < 5, "the cut, not the read timeout, ended the streams"
    assert await read_all(client, request(1)) == "again"
    await client.aclose()
    server.close()


async def test_a_garbled_message_or_a_silent_stream_is_unavailable() -> None:
    async def script(connection: ServerConnection, num: int) -> None:
        await opens(connection, 1)
        if num == 1:
            await connection.send(b"\xc1 not msgpack")
        await connection.wait_closed()

    server, url = await scripted(script)
    client = EngineClient(url, TOKEN, read_timeout_s=0.3)
    with pytest.raises(EngineUnavailableError, match="unreadable"):
        await read_all(client, request(2))
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="TimeoutError"):
        await read_all(client, request(2))
    assert 0.3 <= time.monotonic() - started < 3
    await client.aclose()
    server.close()


async def test_many_concurrent_streams_share_one_connection() -> None:
    backend = StubEngine(token_delay_s=0.001)
    with engine_server(backend, TOKEN) as url:
        client = EngineClient(url, TOKEN)
        sizes = [3 + i % 7 for i in range(64)]
        texts = await asyncio.gather(*(read_all(client, request(size)) for size in sizes))
        assert texts == [" hello" * size for size in sizes]
        link = client._link
        assert await read_all(client, request(2)) == " hello" * 2
        assert client._link is link is not None, "every generation went over the one link"
        assert backend.num_requests == 65 and backend.num_aborted == 0
        await client.aclose()


async def test_aborting_one_stream_leaves_the_others_running() -> None:
    backend = StubEngine(token_delay_s=0.005)
    with engine_server(backend, TOKEN) as url:
        client = EngineClient(url, TOKEN)
        left = request(40)

        async def leave_early() -> None:
            async with client.generate(left) as frames:
                await anext(frames)

        results = await asyncio.gather(
            read_all(client, request(40)), leave_early(), read_all(client, request(40))
        )
        assert results[0] == results[2] == " hello" * 40
        assert backend.num_aborted == 1, "the engine stopped the abandoned generation"
        assert left.request_id not in backend.active
        await client.aclose()


async def test_a_reader_that_stops_reading_holds_up_no_other_stream() -> None:
    """Backpressure: a stream's backlog is bounded; past the bound that stream alone is aborted."""
    backend = StubEngine(token_delay_s=0.001)
    with engine_server(backend, TOKEN) as url:
        client = EngineClient(url, TOKEN, max_stream_bytes=4000)
        stuck = request(2000)
        async with client.generate(stuck) as frames:
            await anext(frames)  # then reads nothing while another generation runs to its end
            assert await read_all(client, request(300)) == " hello" * 300
            with pytest.raises(RequestAbortedError, match="4000 bytes behind"):
                async for _ in frames:
                    pass
        deadline = time.monotonic() + 5
        while stuck.request_id in backend.active and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert stuck.request_id not in backend.active, "the engine stopped the stream past its bound"
        assert await read_all(client, request(2)) == " hello" * 2, "the link itself is still up"
        await client.aclose()


async def test_the_engine_sends_one_message_per_step_for_every_stream() -> None:
    backend = StubEngine()
    sent: list[list[Any]] = []

    async def send(data: bytes) -> None:
        sent.append(msgspec.msgpack.decode(data))

    incoming: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def messages() -> AsyncIterator[bytes]:
        while (data := await incoming.get()) is not None:
            yield data

    session = LinkSession(backend, send)
    run = asyncio.create_task(session.run(messages()))
    for sid in range(1, 11):
        incoming.put_nowait(msgspec.msgpack.encode(LinkOpen(stream=sid, request=request(3, n=2))))
    while backend.num_requests < 10 or session.num_streams:
        await asyncio.sleep(0.01)
    assert [sorted(sid for sid, _ in message) for message in sent] == [list(range(1, 11))] * 3
    assert all(len(frame) == 2 for message in sent for _, frame in message), "both completions in a frame"
    incoming.put_nowait(None)
    await run


async def test_a_closed_link_aborts_every_generation_on_it() -> None:
    backend = StubEngine(token_delay_s=0.01)
    incoming: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def messages() -> AsyncIterator[bytes]:
        while (data := await incoming.get()) is not None:
            yield data

    async def send(data: bytes) -> None:
        return None

    run = asyncio.create_task(LinkSession(backend, send).run(messages()))
    for sid in (1, 2):
        incoming.put_nowait(msgspec.msgpack.encode(LinkOpen(stream=sid, request=request(1000))))
    while len(backend.active) < 2:
        await asyncio.sleep(0.01)
    incoming.put_nowait(msgspec.msgpack.encode(LinkAbort(stream=1)))
    while len(backend.active) > 1:
        await asyncio.sleep(0.01)
    incoming.put_nowait(None)  # the gateway went away
    await run
    assert backend.active == set() and backend.num_aborted == 2
