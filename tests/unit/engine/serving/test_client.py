"""engine.serving.client's HTTP/1.1 calls to its engines, against a scripted server on loopback.

The happy path against the real engine server lives in tests/unit/engine/serving/test_protocol.py,
the link in test_engine_link.py; these tests pin what a real server does less often: answers split
at any byte, trailers, a connection closed while idle, ``connection: close``, silence past the
read timeout, an engine that predates the link.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest

from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, PromptTooLongError
from engine.serving.client import EngineClient
from engine.serving.protocol import EmbedRequest, EngineInfo, ErrorEvent, GenerateRequest, TokenCount

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


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces)
    return framed + b"0\r\nx-trailer: yes\r\n\r\n"


EMBED = EmbedRequest(request_id="e1", model="demo-embed", input=["hi"])
INFO = msgspec.json.encode(EngineInfo(instance_id="e1", models=[]))
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-type: application/json\r\n\r\n"


def count(num_tokens: int) -> bytes:
    body = msgspec.json.encode(TokenCount(num_tokens=num_tokens))
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


async def test_an_answer_split_at_any_byte_is_read_whole(scripted: Start) -> None:
    answer = CHUNKED_HEAD + chunked(INFO, size=7)

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        for i in range(0, len(answer), 5):
            writer.write(answer[i : i + 5])
            await writer.drain()
            await asyncio.sleep(0.001)

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    assert (await client.info()).instance_id == "e1"
    assert (await client.info()).instance_id == "e1"
    assert engine.num_connections == 1, "a fully read answer leaves its connection in the pool"
    assert engine.requests[0].startswith(b"GET /engine/v1/info HTTP/1.1\r\n")
    assert b"authorization: Bearer t\r\n" in engine.requests[0]
    await client.aclose()


async def test_a_connection_the_engine_closed_while_idle_is_replaced(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(count(3))
        await writer.drain()
        writer.close()  # as an idle keep-alive timeout would, without saying so in a header

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    for pause_s in (0.05, 0.05, 0.0, 0.0, 0.0):  # noticed while idle, or only when reused
        assert await client.count_embedding_tokens(EMBED) == 3
        await asyncio.sleep(pause_s)
    assert engine.num_connections == 5
    assert len(engine.requests) == 5, "no request was sent twice"
    await client.aclose()


async def test_connection_close_and_content_length_answers(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(INFO), INFO)
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
        writer.write(count(3)[:-5])  # then nothing more
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t", read_timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="TimeoutError"):
        await client.count_embedding_tokens(EMBED)
    assert 0.2 <= time.monotonic() - started < 2
    assert len(engine.requests) == 1
    await client.aclose()


async def test_an_answer_cut_off_midway_is_unavailable_and_not_resent(scripted: Start) -> None:
    async def respond(writer: asyncio.StreamWriter, num: int) -> None:
        if num == 1:
            writer.write(count(3))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-")
            writer.close()
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    assert await client.count_embedding_tokens(EMBED) == 3
    with pytest.raises(EngineUnavailableError):
        await client.count_embedding_tokens(EMBED)
    assert len(engine.requests) == 2
    await client.aclose()


def test_urls_and_tokens_that_cannot_be_sent_are_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        EngineClient("ftp://engine:21", "t")
    with pytest.raises(ValueError, match="line breaks"):
        EngineClient("http://engine:8100", "t\r\nx-injected: 1")


async def test_a_refusal_answer_raises_its_own_class(scripted: Start) -> None:
    body = msgspec.json.encode(ErrorEvent(code=PromptTooLongError.code, message="too long", param="messages"))

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    _, url = await scripted(respond)
    client = EngineClient(url, "t")
    with pytest.raises(PromptTooLongError, match="too long") as err:
        await client.count_embedding_tokens(EMBED)
    assert err.value.param == "messages"
    await client.aclose()


async def test_an_engine_without_the_link_is_unavailable_not_misread(scripted: Start) -> None:
    """An engine older than the gateway answers the link's upgrade with a plain 404."""

    async def respond(writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    engine, url = await scripted(respond)
    client = EngineClient(url, "t")
    with pytest.raises(EngineUnavailableError, match="refused the link"):
        async with client.generate(request()) as stream:
            [frame async for frame in stream]
    assert engine.requests[0].startswith(b"GET /engine/v1/link HTTP/1.1\r\n")
    assert b"Authorization: Bearer t\r\n" in engine.requests[0]
    await client.aclose()
