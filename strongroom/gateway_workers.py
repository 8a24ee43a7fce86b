"""``strongroom serve`` with ``server.workers`` > 1: gateway worker processes on one port.

    strongroom serve (supervisor)
      ├── engine process            (EngineSupervisor, as with one worker)
      ├── AuditOwner                the one audit writer; workers append through its feed socket
      └── worker 0..N-1             ``strongroom worker --fd``: the full gateway on listening
                                    socket i, which the supervisor bound and passes down

One socket per worker, all bound to the port with SO_REUSEPORT: the kernel spreads new
connections over them by their addresses. (One shared socket would not spread: a worker woken
for one connection accepts every connection queued then, up to asyncio's backlog of 100.) The
supervisor keeps every socket open, so while a worker restarts, connections the kernel put in its
queue wait for the new process instead of being refused. Only processes of the same user can
join a SO_REUSEPORT group, and the port is first bound without it, so a second ``serve`` on a
port in use is refused as before rather than silently sharing the traffic.

Each worker also serves the gRPC API on ``[grpc] port``, binding it itself with SO_REUSEPORT (the
option grpc.so_reuseport): gRPC binds its own sockets, so there is none to pass down; ``serve``
has checked that nobody else holds that port.

What is shared lives outside the workers: quotas and revocations in Redis (``serve`` refuses
several workers without it), the policy in its store (a change is on the version board in shared
memory before its call returns, and a worker behind the board reloads before it decides; see
``policies.policy_freshness``), the audit log in the supervisor. A worker that dies is started again (at once, then backing off if it keeps dying).
SIGTERM (or SIGINT) reaches every worker, each drains for ``server.drain_s``, and the audit log
closes after the last of them, with their final records in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from uvicorn.loops.auto import auto_loop_factory

from strongroom.audit_owner import AuditOwner
from strongroom.config import Settings
from strongroom.supervisor import EngineSupervisor

log = logging.getLogger("strongroom.serve")

__all__ = ["GatewayWorkers", "engine_down_path", "ready_path", "serve_workers"]

_HEALTHY_S = 300.0
"""A worker that ran this long and then died is not in a crash loop: restart it at once."""
_START_TIMEOUT_S = 120.0
_ASKED_TO_STOP = frozenset({0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT})
"""Exit codes of a worker that drained and stopped on a signal (uvicorn exits 0; our handler 143)."""
_POLL_S = 0.1


def engine_down_path(run_dir: Path) -> Path:
    """Present while the supervised engine's process is dead: workers' heartbeats read it, so a
    dead engine is out of service within a beat, as with one worker (``is_process_alive``)."""
    return run_dir / "engine.down"


def ready_path(run_dir: Path, index: int) -> Path:
    """Written by worker ``index`` once its services are up (its pid inside)."""
    return run_dir / f"ready-{index}"


class _Slot:
    __slots__ = ("index", "num_restarts", "proc", "started_at")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.num_restarts = 0


class GatewayWorkers:
    """Starts, watches, restarts and stops the worker processes."""

    def __init__(
        self,
        settings: Settings,
        config_path: str | None,
        *,
        socks: list[socket.socket],
        run_dir: Path,
        supervised_engine_url: str | None,
    ) -> None:
        self._settings = settings
        self._config_path = config_path
        self._socks = socks
        self._run_dir = run_dir
        self._supervised_engine_url = supervised_engine_url
        """Only an engine this serve runs is named to the workers: they ask its process probe on
        every routing decision, which configured engines have none of."""
        self._slots = [_Slot(i) for i in range(len(socks))]

    def __repr__(self) -> str:
        return f"GatewayWorkers(pids={self.pids})"

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self._slots if s.proc is not None]

    def _spawn(self, slot: _Slot) -> None:
        ready_path(self._run_dir, slot.index).unlink(missing_ok=True)
        fd = self._socks[slot.index].fileno()
        cmd = [sys.executable, "-m", "strongroom", "worker", "--fd", str(fd), "--index", str(slot.index)]
        cmd += ["--run-dir", str(self._run_dir)]
        if self._supervised_engine_url is not None:
            cmd += ["--engine-url", self._supervised_engine_url]
        if self._config_path:
            cmd += ["--config", self._config_path]
        server = self._settings.server
        # --host/--port/--grpc-port given to serve are the workers' settings too (banner, /metrics access).
        env = {
            **os.environ,
            "STRONGROOM_SERVER__HOST": server.host,
            "STRONGROOM_SERVER__PORT": str(server.port),
            "STRONGROOM_GRPC__PORT": str(self._settings.grpc.port),
        }
        slot.proc = subprocess.Popen(cmd, pass_fds=(fd,), env=env)
        slot.started_at = time.monotonic()

    async def start(self) -> None:
        """Start every worker and wait until each serves; one that exits first fails the start."""
        for slot in self._slots:
            self._spawn(slot)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not all(ready_path(self._run_dir, s.index).exists() for s in self._slots):
            for slot in self._slots:
                if slot.proc is not None and slot.proc.poll() is not None:
                    raise RuntimeError(
                        f"gateway worker {slot.index} exited with code {slot.proc.returncode} while starting"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway workers did not start within {_START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(_POLL_S)

    async def watch(self, stopping: asyncio.Event, engine: EngineSupervisor | None = None) -> None:
        """Restart workers that die, and tell them when the engine process is dead, until ``stopping``."""
        due: dict[int, float] = {}
        down = str(engine_down_path(self._run_dir))
        async with httpx.AsyncClient(timeout=_POLL_S * 2) as http:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), _POLL_S)
                if stopping.is_set():
                    return
                if engine is not None:
                    await _mark_engine(engine, down, http)
                self._restart_dead(due)

    def _restart_dead(self, due: dict[int, float]) -> None:
        """Start again the workers that died (at once, then backing off if one keeps dying)."""
        now = time.monotonic()
        for slot in self._slots:
            proc = slot.proc
            if proc is None or proc.poll() is None:
                continue
            if slot.index not in due:
                if now - slot.started_at > _HEALTHY_S:
                    slot.num_restarts = 0
                slot.num_restarts += 1
                # The first death restarts at once (the others serve meanwhile); a loop backs off.
                delay = 0.0 if slot.num_restarts == 1 else min(2.0 ** (slot.num_restarts - 1), 30.0)
                if proc.returncode in _ASKED_TO_STOP:
                    # Stopped by a signal sent to the whole group (systemd, Ctrl-C): the supervisor's
                    # own copy is about to stop everything; restart only if it does not.
                    delay = max(delay, 5 * _POLL_S)
                log.error(
                    "gateway worker %d (pid %d) exited with code %s; restarting in %.0f s",
                    slot.index,
                    proc.pid,
                    proc.returncode,
                    delay,
                )
                due[slot.index] = now + delay
            if now >= due[slot.index]:
                del due[slot.index]
                self._spawn(slot)

    def stop(self, timeout_s: float) -> None:
        """SIGTERM every worker (each drains), wait up to ``timeout_s``, then SIGKILL what is left."""
        procs = [s.proc for s in self._slots if s.proc is not None and s.proc.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.error("gateway worker pid %d did not stop in time; killing it", proc.pid)
                proc.kill()
                proc.wait()


async def _mark_engine(engine: EngineSupervisor, down: str, http: httpx.AsyncClient) -> None:
    """Down from the engine process's death until its replacement answers its health probe (a
    file's presence: one ``stat`` per worker heartbeat; local disk, so not worth a thread)."""
    if not engine.is_alive(engine.url):
        open(down, "a").close()  # noqa: ASYNC230
    elif os.path.exists(down):  # noqa: ASYNC240
        headers = {"authorization": f"Bearer {engine.token}"}
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(f"{engine.url}/engine/v1/health", headers=headers)).status_code == 200:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(down)


def listening_sockets(host: str, port: int, num: int) -> list[socket.socket]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family):  # EADDRINUSE if anyone holds the port
        pass
    socks: list[socket.socket] = []
    try:
        for _ in range(num):
            socks.append(socket.create_server((host, port), family=family, backlog=2048, reuse_port=True))
            port = socks[0].getsockname()[1]  # port 0: the others join the one the first got
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def serve_workers(
    settings: Settings,
    config_path: str | None,
    *,
    num_workers: int,
    engine: EngineSupervisor | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; raises ``SystemExit`` when the port is taken."""
    server = settings.server
    try:
        socks = listening_sockets(server.host, server.port, num_workers)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", server.host, server.port, exc)
        raise SystemExit(3) from None
    run_dir = Path(tempfile.mkdtemp(prefix="strongroom-"))  # 0700: the feed socket and ready files
    try:
        # The loop uvicorn gives the workers (uvloop where installed): the supervisor's turns are
        # the audit feed's, one per frame a worker sends.
        with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
            runner.run(_supervise(settings, config_path, socks, run_dir, engine))
    finally:
        for sock in socks:
            sock.close()
        shutil.rmtree(run_dir, ignore_errors=True)


async def _supervise(
    settings: Settings,
    config_path: str | None,
    socks: list[socket.socket],
    run_dir: Path,
    engine: EngineSupervisor | None,
) -> None:
    owner = await AuditOwner.open(settings, run_dir / "audit.sock")
    supervised = engine.url if engine is not None else None
    workers = GatewayWorkers(
        settings, config_path, socks=socks, run_dir=run_dir, supervised_engine_url=supervised
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await workers.start()
        log.info("%d gateway workers serving (pids %s)", len(socks), workers.pids)
        await workers.watch(stopping, engine)
    finally:
        await asyncio.to_thread(workers.stop, settings.server.drain_s + 10.0)
        await owner.close()
