"""An engine server in a thread on a free loopback port: any backend on uvicorn's defaults
(``engine_server``), or the stub engine through a ``Listener`` (its TLS and connection limits)
for tests of the listener itself (``stub_engine_on``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from engine.serving.backend import EngineBackend
from engine.serving.protocol import KeyOperationEvent
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
from strongroom.listener import Listener


@contextmanager
def _served(config: uvicorn.Config) -> Iterator[int]:
    """Runs ``config`` in a thread on a free loopback port; yields the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config.log_level = "error"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def engine_server(
    backend: EngineBackend, token: str, *, key_operations: list[KeyOperationEvent] | None = None
) -> Iterator[str]:
    """Yields the server's URL; the server stops when the block ends."""
    app = EngineServer(backend, token, key_operations=key_operations).app()
    with _served(uvicorn.Config(app, lifespan="on")) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def stub_engine_on(listener: Listener, token: str) -> Iterator[int]:
    """Yields the port; the server stops when the block ends."""
    with _served(listener.uvicorn_config(EngineServer(StubEngine(), token).app())) as port:
        yield port
