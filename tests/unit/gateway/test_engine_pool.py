"""EnginePool over real engine processes on loopback: a hung or dead engine costs a fast error.

Each test runs the engine server (stub backend, 20 ms between tokens) in a child process of its
own, so it can be stopped with SIGSTOP (a hang) or killed (a crash) like a real engine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest
from gateway.engine_pool import EnginePool, Heartbeat

pytestmark = pytest.mark.anyio
TOKEN = "pool-test-token"
READ_TIMEOUT_S = 60.0
BEAT = Heartbeat(interval_s=0.1, timeout_s=0.3, misses=2)
_ENGINE = """
import socket, sys, uvicorn
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
sock = socket.socket(fileno=int(sys.argv[1]))
app = EngineServer(StubEngine(token_delay_s=0.02), sys.argv[2]).app()
uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on")).run(sockets=[sock])
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """The engine's socket, held by the test like ``serve``'s supervisor holds it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


def _spawn(sock: socket.socket) -> subprocess.Popen[bytes]:
    fd = sock.fileno()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", _ENGINE, str(fd), TOKEN], pass_fds=(fd,), env=env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait(10)


async def _until(condition: object, what: str, timeout_s: float = 20.0) -> float:
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - start < timeout_s, f"timed out waiting for: {what}"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


def _request(max_tokens: int) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        model="demo-chat",
        prompt="hi",
        params=SamplingParams(max_tokens=max_tokens),
    )


async def _pool(url: str, **kw: object) -> EnginePool:
    client = EngineClient(url, TOKEN, read_timeout_s=READ_TIMEOUT_S)
    pool = EnginePool([client], refresh_s=60.0, heartbeat=BEAT, **kw)  # type: ignore[arg-type]
    await pool.start()
    await _until(lambda: "demo-chat" in pool.models(), "the engine in service")
    return pool


async def test_a_hung_engine_ends_streams_in_flight_and_comes_back_when_it_answers(
    listening: socket.socket,
) -> None:
    proc = _spawn(listening)
    try:
        pool = await _pool(f"http://127.0.0.1:{listening.getsockname()[1]}")
        client = pool.pick("demo-chat")
        assert client is not None
        received = 0
        start = 0.0
        with pytest.raises(EngineUnavailableError, match="out of service"):
            async with client[0].generate(_request(2000)) as frames:
                async for _ in frames:
                    received += 1
                    if received == 3:
                        proc.send_signal(signal.SIGSTOP)
                        start = time.monotonic()
        # The heartbeat, not the read timeout, ended the stream.
        assert time.monotonic() - start < READ_TIMEOUT_S / 2
        assert pool.pick("demo-chat") is None and pool.models() == {}

        proc.send_signal(signal.SIGCONT)
        await _until(lambda: pool.pick("demo-chat") is not None, "back in service after SIGCONT")
        async with client[0].generate(_request(3)) as frames:
            assert len([e async for frame in frames for e in frame]) == 3
        await pool.aclose()
    finally:
        _stop(proc)


async def test_a_dead_engine_is_out_of_service_at_once_when_its_supervisor_says_so(
    listening: socket.socket,
) -> None:
    """The supervisor keeps the socket across restarts, so a connection to a dead engine only
    queues: without the process probe a request would wait for the replacement."""
    proc = _spawn(listening)
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    probes: list[str] = []

    def alive(probed: str) -> bool:
        probes.append(probed)
        return proc.poll() is None

    slow = Heartbeat(interval_s=0.1, timeout_s=30.0, misses=5)  # probes alone would take minutes
    try:
        client = EngineClient(url, TOKEN, read_timeout_s=READ_TIMEOUT_S)
        pool = EnginePool([client], refresh_s=60.0, heartbeat=slow, is_process_alive=alive)
        await pool.start()
        await _until(lambda: pool.pick("demo-chat") is not None, "the engine in service")
        proc.kill()
        proc.wait(10)
        await _until(lambda: pool.pick("demo-chat") is None, "out of service after the kill", timeout_s=5.0)
        assert probes and set(probes) == {url}
        assert pool.describe()[0]["healthy"] is False

        replacement = _spawn(listening)
        try:
            proc = replacement
            await _until(lambda: pool.pick("demo-chat") is not None, "the replacement in service")
        finally:
            await pool.aclose()
    finally:
        _stop(proc)


async def test_a_request_after_a_death_the_supervisor_knows_of_is_not_routed_there(
    listening: socket.socket,
) -> None:
    """CI once routed a request 0.5 s after a kill to the kept socket: the heartbeat's probe had
    started before the death was known and waited its whole timeout, so only the next beat would
    have asked the supervisor. ``pick`` asks it itself (no beat runs in this test)."""
    proc = _spawn(listening)
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    never = Heartbeat(interval_s=3600.0, timeout_s=30.0, misses=5)
    try:
        client = EngineClient(url, TOKEN, read_timeout_s=READ_TIMEOUT_S)
        pool = EnginePool(
            [client], refresh_s=60.0, heartbeat=never, is_process_alive=lambda _: proc.poll() is None
        )
        await pool.start()
        assert pool.pick("demo-chat") is not None
        proc.kill()
        proc.wait(10)
        assert pool.pick("demo-chat") is None
        assert pool.describe()[0]["healthy"] is False and pool.models() == {}
        await pool.aclose()
    finally:
        _stop(proc)


async def test_a_slow_model_list_does_not_take_an_engine_out_of_service(listening: socket.socket) -> None:
    """The pool once marked a merely busy engine down because its info call timed out; only the
    heartbeat decides health now (here it tolerates the pause: 100 misses)."""
    proc = _spawn(listening)
    try:
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        client = EngineClient(url, TOKEN, read_timeout_s=READ_TIMEOUT_S)
        patient = Heartbeat(interval_s=0.1, timeout_s=0.3, misses=100)
        pool = EnginePool([client], refresh_s=60.0, heartbeat=patient)
        await pool.start()
        assert pool.pick("demo-chat") is not None
        proc.send_signal(signal.SIGSTOP)
        await pool.refresh()  # the info call times out
        proc.send_signal(signal.SIGCONT)
        assert pool.pick("demo-chat") is not None
        await pool.aclose()
    finally:
        _stop(proc)


async def test_a_killed_engine_fails_every_stream_on_its_link_at_once_and_its_replacement_serves(
    listening: socket.socket,
) -> None:
    """All of a worker's streams to an engine share one link: kill -9 ends every one of them
    when the socket closes, without waiting for a heartbeat (here one that would take minutes);
    the next generation opens a new link to the replacement."""
    proc = _spawn(listening)
    slow = Heartbeat(interval_s=0.1, timeout_s=30.0, misses=50)
    try:
        client = EngineClient(
            f"http://127.0.0.1:{listening.getsockname()[1]}", TOKEN, read_timeout_s=READ_TIMEOUT_S
        )
        pool = EnginePool([client], refresh_s=60.0, heartbeat=slow)
        await pool.start()
        await _until(lambda: pool.pick("demo-chat") is not None, "the engine in service")
        started = asyncio.Event()
        killed_at = 0.0

        async def stream() -> int:
            received = 0
            async with client.generate(_request(2000)) as frames:
                async for _ in frames:
                    received += 1
                    if received == 2:
                        started.set()
            return received

        async def kill() -> None:
            nonlocal killed_at
            await started.wait()
            await asyncio.sleep(0.1)
            killed_at = time.monotonic()
            proc.kill()

        results = await asyncio.gather(*(stream() for _ in range(5)), kill(), return_exceptions=True)
        assert all(isinstance(r, EngineUnavailableError) for r in results[:5]), results
        assert time.monotonic() - killed_at < 3, "the link's end, not a heartbeat, ended the streams"
        proc.wait(10)

        proc = _spawn(listening)
        deadline = time.monotonic() + 20
        while not await client.is_ready():
            assert time.monotonic() < deadline, "the replacement did not start"
            await asyncio.sleep(0.05)
        async with client.generate(_request(3)) as frames:
            assert len([e async for frame in frames for e in frame]) >= 1
        await pool.aclose()
    finally:
        _stop(proc)
