"""Slow and greedy clients on real sockets against a listener with short deadlines.

Before the guard, each of these connections stayed open for as long as the client kept it
(450 slowloris connections were held indefinitely); the loops below give up after 5 s.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import msgspec
import pytest

from gateway.listener_config import ConnectionLimits, TlsConfig
from strongroom.listener import Listener
from tests.stub_engine_server import stub_engine_on

pytestmark = pytest.mark.integration
TOKEN = "engine-token-for-slow-client-tests"
LIMITS = ConnectionLimits(
    header_timeout_s=0.5,
    body_timeout_s=0.5,
    keep_alive_timeout_s=5,
    max_head_bytes=1024,
    max_connections=64,
    max_connections_per_client=4,
)
HEALTH = f"GET /engine/v1/health HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\r\n".encode()
GIVE_UP_S = 5.0


def served(limits: ConnectionLimits) -> AbstractContextManager[int]:
    return stub_engine_on(Listener(TlsConfig(), limits, resolve=Path, where="test"), TOKEN)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with served(LIMITS) as p:
        yield p


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=GIVE_UP_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def trickle(s: socket.socket, first: bytes, drip: bytes) -> bytes:
    """Send ``first``, then one byte of ``drip`` every 0.1 s (none if empty) until the server closes
    the connection; returns what it answered. A drip byte that crosses the server's close makes
    the kernel reset the connection and drop the answer: then the answer reads as empty."""
    s.sendall(first)
    s.settimeout(0.1)
    deadline = time.monotonic() + GIVE_UP_S
    received = b""
    i = 0
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
            if not chunk:
                return received  # closed by the server
            received += chunk
        except TimeoutError:
            pass
        except ConnectionResetError:
            return received
        if drip:
            try:
                s.send(drip[i % len(drip) : i % len(drip) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return received
            i += 1
    raise AssertionError(f"the server still held the connection after {GIVE_UP_S} s")


def timed_out(answer: bytes) -> bool:
    return answer == b"" or status_of(answer) == 408


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def request(port: int) -> int:
    with connect(port) as s:
        s.sendall(HEALTH)
        return status_of(s.recv(4096))


def test_headers_sent_byte_by_byte_get_408_and_the_connection_closes(port: int) -> None:
    with connect(port) as s:
        answer = trickle(s, b"GET /engine/v1/health HTTP/1.1\r\nhost: x\r\n", b"x-pad: a\r\n")
    assert timed_out(answer)


def test_a_kept_alive_connection_gets_the_header_deadline_for_its_next_request(port: int) -> None:
    with connect(port) as s:
        s.sendall(HEALTH)
        assert status_of(s.recv(4096)) == 200
        # uvicorn's own keep-alive timer is cancelled by every byte: only the guard ends this.
        answer = trickle(s, b"GET /engine/v1/health HTTP/1.1\r\n", b"x-pad: a\r\n")
    assert timed_out(answer)


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with connect(port) as s:
        s.settimeout(GIVE_UP_S)
        assert status_of(s.recv(4096)) == 408
        assert s.recv(4096) == b""


def test_a_body_sent_byte_by_byte_gets_408(port: int) -> None:
    head = (
        "POST /engine/v1/generate HTTP/1.1\r\nhost: x\r\n"
        f"authorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    )
    with connect(port) as s:
        answer = trickle(s, head.encode() + b'{"request_id": "', b"a")
    assert timed_out(answer)


def test_an_oversized_head_gets_431(port: int) -> None:
    with connect(port) as s:
        answer = trickle(s, b"GET /engine/v1/health HTTP/1.1\r\nx-big: " + b"a" * 1100, b"")
    assert status_of(answer) == 431


def test_one_client_holds_at_most_its_share_of_connections() -> None:
    limits = msgspec.structs.replace(LIMITS, header_timeout_s=60.0)  # the idle ones must stay
    with served(limits) as port, ExitStack() as held:
        idle = [held.enter_context(connect(port)) for _ in range(LIMITS.max_connections_per_client)]
        for s in idle:  # each is admitted: a byte of a request keeps it waiting for its headers
            s.sendall(b"G")
        with connect(port) as extra:
            extra.settimeout(GIVE_UP_S)
            assert status_of(extra.recv(4096)) == 429
        idle[0].close()
        deadline = time.monotonic() + GIVE_UP_S
        while (status := request(port)) == 429:  # the freed slot is reused once the server saw the close
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert status == 200


def test_an_engine_link_outlives_the_body_deadline_and_is_counted_only_while_open(port: int) -> None:
    """A WebSocket link is a request whose "body" never ends: the guard's body deadline must not
    cut it (it wrote a 408 into the link and closed it), and a link that closed must give its
    connection back to the per-client count (uvicorn moves an upgraded connection to another
    protocol, whose end the guard never heard of: a few reconnects then met 429)."""
    import asyncio

    from engine.core.sampling_params import SamplingParams
    from engine.serving.client import EngineClient
    from engine.serving.protocol import GenerateRequest

    def request() -> GenerateRequest:
        return GenerateRequest(
            request_id=f"r-{time.monotonic_ns()}",
            model="demo-chat",
            prompt="x",
            params=SamplingParams(max_tokens=2),
        )

    async def text(client: EngineClient) -> str:
        async with client.generate(request()) as frames:
            return "".join([e.text async for frame in frames for e in frame])

    async def scenario() -> None:
        client = EngineClient(f"http://127.0.0.1:{port}", TOKEN)
        assert await text(client) == " hello" * 2
        link = client._link
        await asyncio.sleep(LIMITS.body_timeout_s * 2)
        assert await text(client) == " hello" * 2
        assert client._link is link, "the link outlived the body deadline"
        for _ in range(LIMITS.max_connections_per_client + 2):  # each reset closes the link
            client.reset("test: a new link")
            assert await text(client) == " hello" * 2
        await client.aclose()

    asyncio.run(scenario())
