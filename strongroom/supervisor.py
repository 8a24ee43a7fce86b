"""``strongroom serve``: the gateway in this process, one engine instance in a child process.

The supervisor binds the engine's loopback socket itself and hands the descriptor to the
child, so the port is known before the child starts and survives its restarts. If the engine
dies, the gateway answers 503 for its models and the supervisor starts a new one.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

import httpx

from strongroom.config import Settings

log = logging.getLogger("strongroom.serve")

__all__ = ["EngineSupervisor"]

_HEALTHY_S = 300.0


class EngineSupervisor:
    """Starts, watches and restarts the local engine process."""

    def __init__(
        self, settings: Settings, config_path: str | None, *, stub: bool = False, max_restarts: int = 5
    ):
        self._settings = settings
        self._config_path = config_path
        self._stub = stub
        self._max_restarts = max_restarts
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(512)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env_name = settings.server.engine_token_env
        self.token = os.environ.get(env_name) or secrets.token_urlsafe(32)
        os.environ[env_name] = self.token
        self._proc: subprocess.Popen[bytes] | None = None
        self._replacing = False
        """From a death until its replacement answers health: a process that only started is not
        yet an engine (connections to the kept socket queue until it serves)."""
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="engine-supervisor", daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        fd = self._sock.fileno()
        cmd = [sys.executable, "-m", "strongroom", "engine", "--fd", str(fd)]
        if self._config_path:
            cmd += ["--config", self._config_path]
        if self._stub:
            cmd.append("--stub")
        return subprocess.Popen(cmd, pass_fds=(fd,), env=dict(os.environ))

    def start(self) -> None:
        self._proc = self._spawn()
        self.wait_ready(self._settings.server.engine_start_timeout_s)
        self._watcher.start()

    def is_alive(self, url: str) -> bool:
        """False once the engine process at ``url`` (this supervisor's) has exited, before any probe
        could tell, and until its replacement answers health: connections to the socket this
        supervisor keeps would only queue until the replacement serves."""
        proc = self._proc
        return url != self.url or (proc is not None and proc.poll() is None and not self._replacing)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"the engine process exited with code {self._proc.returncode} while starting"
                )
            if self._answers_health():
                return
            time.sleep(0.1)
        raise RuntimeError(f"the engine did not become ready within {timeout_s:.0f} s")

    def _answers_health(self) -> bool:
        headers = {"authorization": f"Bearer {self.token}"}
        try:
            return httpx.get(f"{self.url}/engine/v1/health", headers=headers, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _watch(self) -> None:
        restarts = 0
        started = time.monotonic()
        while not self._stopping.wait(0.5):
            proc = self._proc
            if proc is None or proc.poll() is None:
                if restarts and time.monotonic() - started > _HEALTHY_S:
                    restarts = 0  # a crash after a long healthy run is not a crash loop
                continue
            if restarts >= self._max_restarts:
                log.error("engine exited %d times; not restarting (models answer 503)", restarts)
                self._sock.close()  # refuse connections at once instead of queueing them
                return
            restarts += 1
            log.error(
                "engine exited with code %s; restarting (%d/%d)",
                proc.returncode,
                restarts,
                self._max_restarts,
            )
            # The first crash restarts at once (the gateway answers 503 meanwhile, never waits);
            # a crash loop backs off.
            time.sleep(0.0 if restarts == 1 else min(2.0 ** (restarts - 1), 30.0))
            if not self._stopping.is_set():
                self._replacing = True  # before the new process is seen: never alive in between
                self._proc = self._spawn()
                started = time.monotonic()
                self._await_replacement()

    def _await_replacement(self) -> None:
        """Clear ``_replacing`` once the new process answers health; leave it to the next round of
        the watch if the process dies first."""
        proc = self._proc
        while not self._stopping.is_set() and proc is not None and proc.poll() is None:
            if self._answers_health():
                self._replacing = False
                return
            self._stopping.wait(0.1)

    def stop(self) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._sock.close()
