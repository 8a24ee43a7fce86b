"""Integration fixtures: a real ``strongroom serve`` in a subprocess on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from click.testing import CliRunner

from gateway.auth.dev_issuer import DevIssuer
from strongroom.cli.audit import audit
from strongroom.config import load_settings
from tests.ports import free_port, free_ports

REPO = Path(__file__).resolve().parents[2]
_TOKEN_TTL_S = 3600
"""``strongroom token``'s default --ttl."""


T = TypeVar("T")


def wait_for(probe: Callable[[], T], *, what: str, timeout_s: float = 20.0) -> T:
    """``probe()``'s first truthy answer, asked every 0.1 s, for state a gateway reaches in the
    background (a watcher's poll, the writer's retry, a worker's metrics publish). A fixed sleep is
    a guess that a loaded machine can outlast."""
    deadline = time.monotonic() + timeout_s
    while not (answer := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last answer: {answer!r})")
        time.sleep(0.1)
    return answer


@dataclass
class ServedGateway:
    base_url: str
    data_dir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log_path: Path
    grpc_port: int = 0

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def grpc_target(self) -> str:
        """The gRPC API's address (``grpc.insecure_channel(gw.grpc_target)``)."""
        return f"127.0.0.1:{self.grpc_port}"

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "strongroom", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"strongroom {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done

    def token(self, sub: str, *roles: str) -> str:
        """What ``strongroom token --sub SUB --role ROLE...`` prints for this gateway, minted here.

        The same steps as the command (its settings from this gateway's environment, the same key
        file, the same 0077 umask should it create the key) without a Python start per token: a
        CLI run cost ~2.5 s, and the integration tests mint ~90. The command itself is tested in
        tests/unit/strongroom/cli/test_token.py; ``cli("token", ...)`` still runs it."""
        settings = load_settings(environ=self.env)
        assert settings.auth.dev_issuer, "auth.dev_issuer is off: `strongroom token` would refuse"
        assert settings.auth.max_lifetime_s >= _TOKEN_TTL_S, "`strongroom token` would refuse its --ttl"
        previous = os.umask(0o077)
        try:
            issuer = DevIssuer.load_or_create(settings.data_path)
        finally:
            os.umask(previous)
        return issuer.mint(sub, roles, ttl_s=_TOKEN_TTL_S)

    def audit_records(self, n: int = 500) -> list[dict[str, object]]:
        """What ``strongroom audit tail --json -n N`` prints, the command run in this process.

        The same command and settings as ``cli("audit", "tail", ...)`` (a read-only view of the
        log), without a Python start per read: the tests read the log ~50 times, ~2.5 s each.
        Under a running event loop (Playwright's sync API runs one), where the command's own
        ``asyncio.run`` cannot start, it runs as ``cli`` does."""
        args = ["tail", "--json", "-n", str(n)]
        if _has_running_loop():
            out = self.cli("audit", *args).stdout
        else:
            done = CliRunner().invoke(audit, args, env=self.env)
            if done.exit_code != 0:
                raise AssertionError(f"strongroom audit tail exited {done.exit_code}:\n{done.output[-3000:]}")
            out = done.stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def audit_for(self, request_id: str) -> list[dict[str, object]]:
        return [r for r in self.audit_records() if r["event"].get("request_id") == request_id]  # type: ignore[index]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _has_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextmanager
def served_gateway(
    tmp: Path,
    *,
    extra_env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    wait_ready: bool = True,
    port: int | None = None,
) -> Iterator[ServedGateway]:
    """``port``: a free port chosen beforehand, for configuration that names the gateway's URL."""
    grpc_port, chosen = free_ports(2)
    port = port or chosen
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env.update(
        {
            "STRONGROOM_DATA_DIR": str(data_dir),
            "STRONGROOM_SERVER__PORT": str(port),
            # A port of its own: concurrent gateways would all take the default 50051.
            "STRONGROOM_GRPC__PORT": str(grpc_port),
            "STRONGROOM_ENGINE__NUM_THREADS": "1",
            # One gateway process unless a test asks for more (tests/integration/gateway/test_workers.py).
            "STRONGROOM_SERVER__WORKERS": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    env.update(extra_env or {})
    log_path = tmp / "serve.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom", "serve", *args],
        cwd=tmp,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    served = ServedGateway(
        base_url=base,
        data_dir=data_dir,
        env=env,
        proc=proc,
        log_path=log_path,
        grpc_port=int(env["STRONGROOM_GRPC__PORT"]),
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"strongroom serve exited with {proc.returncode}:\n{served.log()}")
            try:
                if httpx.get(f"{base}/{'readyz' if wait_ready else 'healthz'}", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"strongroom serve not ready in time:\n{served.log()}")
            time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    with served_gateway(tmp_path_factory.mktemp("serve")) as served:
        yield served


@pytest.fixture(scope="session")
def serve() -> Any:
    """``with serve(tmp_path, extra_env=..., args=...) as gw:`` — a gateway of the test's own."""
    return served_gateway


@pytest.fixture(scope="module")
def stub_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    """A gateway over the model-free stub engine, shared by one module (control-plane tests)."""
    with served_gateway(tmp_path_factory.mktemp("stub-serve"), args=("--stub-engine",)) as served:
        yield served


@dataclass
class PrivateRedis:
    """A redis-server of the test's own, to stop, stall (SIGSTOP) and resume; never the shared one."""

    proc: subprocess.Popen[bytes]
    url: str

    def stall(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = PrivateRedis(proc=proc, url=f"redis://127.0.0.1:{port}/0")
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    try:
        yield server
    finally:
        if proc.poll() is None:
            server.stop()


SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"


@dataclass
class SoftHsmToken:
    """A fresh SoftHSM2 token in a temp directory. PKCS#11 initializes once per process, with the
    SOFTHSM2_CONF it finds then, so the token is only ever used from subprocesses given ``env``."""

    conf: str
    label: str
    pin: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SOFTHSM2_CONF": self.conf}

    def run_python(self, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``script`` in a fresh interpreter that sees this token."""
        return subprocess.run(
            [sys.executable, "-c", script, *args], env=self.env, capture_output=True, text=True, timeout=60
        )


@pytest.fixture
def softhsm_token(tmp_path: Path) -> SoftHsmToken:
    import shutil

    util = shutil.which("softhsm2-util")
    assert util and Path(SOFTHSM_MODULE).exists(), "SoftHSM2 missing: run scripts/system-deps.sh"
    root = tmp_path / "softhsm"
    (root / "tokens").mkdir(parents=True)
    conf = root / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    token = SoftHsmToken(conf=str(conf), label="audit", pin="4321-user")
    subprocess.run(
        [util, "--init-token", "--free", "--label", token.label, "--so-pin", "so-1234", "--pin", token.pin],
        check=True, capture_output=True, env=token.env,
    )  # fmt: skip
    return token
