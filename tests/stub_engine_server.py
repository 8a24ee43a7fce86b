"""The stub engine's server in a thread on a free loopback port, served through a ``Listener``
(its TLS and connection limits): for tests of the listener itself."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
from strongroom.listener import Listener


@contextmanager
def stub_engine_on(listener: Listener, token: str) -> Iterator[int]:
    """Yields the port; the server stops when the block ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = listener.uvicorn_config(EngineServer(StubEngine(), token).app())
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
