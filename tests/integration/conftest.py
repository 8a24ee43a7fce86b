"""Integration fixtures: a real ``strongroom serve`` in a subprocess on a free loopback port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServedGateway:
    base_url: str
    data_dir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "strongroom", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def token(self, sub: str, *roles: str) -> str:
        args = ["token", "--sub", sub]
        for role in roles:
            args += ["--role", role]
        return self.cli(*args).stdout.strip()

    def audit_records(self, n: int = 500) -> list[dict[str, object]]:
        out = self.cli("audit", "tail", "--json", "-n", str(n)).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def audit_for(self, request_id: str) -> list[dict[str, object]]:
        return [r for r in self.audit_records() if r["event"].get("request_id") == request_id]  # type: ignore[index]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


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
    port = port or free_port()
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env.update(
        {
            "STRONGROOM_DATA_DIR": str(data_dir),
            "STRONGROOM_SERVER__PORT": str(port),
            "STRONGROOM_ENGINE__NUM_THREADS": "1",
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
    served = ServedGateway(base_url=base, data_dir=data_dir, env=env, proc=proc, log_path=log_path)
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


@pytest.fixture
def serve() -> Any:
    """``with serve(tmp_path, extra_env=..., args=...) as gw:`` — a gateway of the test's own."""
    return served_gateway
