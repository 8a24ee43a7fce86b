"""The workers' listening sockets (one SO_REUSEPORT group per ``serve``, never joined by another)
and the supervisor's event loop."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import msgspec
import pytest
from uvicorn.loops.auto import auto_loop_factory

from strongroom import gateway_workers
from strongroom.config import Settings
from strongroom.gateway_workers import listening_sockets
from tests.ports import free_port


def test_each_worker_gets_its_own_socket_on_the_one_port_and_a_second_serve_is_refused() -> None:
    socks = listening_sockets("127.0.0.1", 0, 3)
    try:
        port = socks[0].getsockname()[1]
        assert [s.getsockname() for s in socks] == [("127.0.0.1", port)] * 3
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in socks)
        with pytest.raises(OSError):  # another serve of the same user must not share the traffic
            listening_sockets("127.0.0.1", port, 2)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        for s in socks:
            s.close()


def test_the_supervisor_runs_on_the_loop_uvicorn_gives_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvloop where installed: every frame of the audit feed is a turn of the supervisor's loop."""
    loops: list[type[asyncio.AbstractEventLoop]] = []

    async def supervise(*_: object) -> None:
        loops.append(type(asyncio.get_running_loop()))

    monkeypatch.setattr(gateway_workers, "_supervise", supervise)
    settings = Settings(server=msgspec.structs.replace(Settings().server, host="127.0.0.1", port=free_port()))
    gateway_workers.serve_workers(settings, None, num_workers=2)
    assert loops == [type(auto_loop_factory()())]
    assert loops[0].__module__.startswith("uvloop")  # installed with uvicorn[standard]


@pytest.mark.parametrize(
    "supervised", ["http://127.0.0.1:7001", None], ids=["serve-runs-the-engine", "configured-engines"]
)
def test_only_an_engine_serve_runs_is_named_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, supervised: str | None
) -> None:
    """A worker asks the process probe of the engines it is named on every routing decision;
    engines from ``server.engine_urls`` have no process here, so naming them would only cost a
    ``stat`` of a file nobody writes. The workers read those from the settings instead."""
    commands: list[list[str]] = []

    class Recorded:
        pid = 1

        def __init__(self, cmd: list[str], **_: object) -> None:
            commands.append(cmd)

    monkeypatch.setattr(gateway_workers.subprocess, "Popen", Recorded)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        workers = gateway_workers.GatewayWorkers(
            Settings(), None, socks=[sock], run_dir=tmp_path, supervised_engine_url=supervised
        )
        workers._spawn(workers._slots[0])
    [cmd] = commands
    named = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--engine-url"]
    assert named == ([supervised] if supervised else [])
