"""Crash consistency: SIGKILL the gateway at random points, restart it, and check the log.

Each iteration: a gateway (forked from a pre-imported parent and waiting for the writer lock)
takes over from the one killed before it; plain and streamed requests run against it while a
CLI command (tail, search, export, verify, in turn) runs beside it; after a random delay it is
SIGKILLed. Then, reading the database read-only as any reader would:

- every request answered 2xx has its record, and a stream that reached ``[DONE]`` its final one;
- a CLI search or export that exited 0 is itself on the record; tail and verify never fail;
- the chain verifies, and sequence numbers run 1..N with no gap or duplicate.

Seeded and sized by ``AUDIT_CRASH_SEED`` / ``AUDIT_CRASH_ITERATIONS`` (50 in CI); for longer runs:

    python tests/integration/audit/test_crash_consistency.py --iterations 500 --seed 7
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from audit.bundle import verify_store
from audit.signer import CheckpointSigner
from audit.sqlite_store import SqliteStore
from tests.ports import free_port

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
_ENGINE_TOKEN = "crash-harness-engine-token"
_CLI_COMMANDS = ("tail", "search", "export", "verify")


@dataclass
class Outcome:
    """What the clients and operators of one run were told."""

    answered: dict[str, bool] = field(default_factory=dict)
    """2xx request id -> whether it was a stream that reached [DONE]."""
    audited_cli: list[str] = field(default_factory=list)
    """Unique subjects of CLI searches/exports that exited 0: each must have its access record."""
    num_kills: int = 0
    num_cli: dict[str, int] = field(default_factory=dict)


class Harness:
    def __init__(self, work: Path, seed: int) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.data = work / "data"
        self.rng = random.Random(seed)
        self.engine_port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
        self.env = {
            **base,
            "PYTHONPATH": str(REPO),
            "STRONGROOM_DATA_DIR": str(self.data),
            "STRONGROOM_ENGINE_TOKEN": _ENGINE_TOKEN,
            "STRONGROOM_SERVER__ENGINE_URLS": f'["http://127.0.0.1:{self.engine_port}"]',
            "STRONGROOM_AUDIT__CHECKPOINT_EVERY": "20",  # checkpoints (and WAL copies) all the time
            "STRONGROOM_AUDIT__WRITER_LOCK_WAIT_S": "120",
            "OMP_NUM_THREADS": "1",
        }
        self.outcome = Outcome()
        self._num_children = 0
        self._pids: list[int] = []

    def __enter__(self) -> Harness:
        self.engine = subprocess.Popen(
            [sys.executable, "-m", "strongroom", "engine", "--stub", "--port", str(self.engine_port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.zygote = subprocess.Popen(
            [sys.executable, str(HERE / "gateway_zygote.py")],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            token = self.run_cli(["token", "--sub", "alice", "--role", "analyst"])
            assert token.rc == 0, token.log
        except BaseException:
            self.__exit__()
            raise
        self.token = token.log.strip().splitlines()[-1]
        return self

    def __exit__(self, *exc: object) -> None:
        for pid in self._pids:  # whatever is still running after a failure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in (self.zygote, self.engine):
            proc.kill()
            proc.wait()
        if self.zygote.stdin is not None:
            self.zygote.stdin.close()
        if self.zygote.stdout is not None:
            self.zygote.stdout.close()

    def fork(self, argv: list[str], env: dict[str, str] | None = None) -> tuple[int, Path]:
        self._num_children += 1
        log = self.work / f"child-{self._num_children}.log"
        assert self.zygote.stdin is not None and self.zygote.stdout is not None
        request = {"argv": argv, "env": {**self.env, **(env or {})}, "log": str(log)}
        self.zygote.stdin.write(json.dumps(request) + "\n")
        self.zygote.stdin.flush()
        pid = int(self.zygote.stdout.readline())
        self._pids.append(pid)
        return pid, log

    def run_cli(self, argv: list[str]) -> CliRun:
        pid, log = self.fork(argv)
        return CliRun(argv, pid, log)

    # -- one iteration -------------------------------------------------------------------------

    def start_gateway(self) -> Gateway:
        port = free_port()
        pid, log = self.fork(
            ["serve"], {"STRONGROOM_SERVER__PORT": str(port), "STRONGROOM_GRPC__ENABLED": "false"}
        )
        return Gateway(pid, port, log)

    async def iteration(self, gateway: Gateway, k: int) -> None:
        await gateway.wait_ready()
        command = _CLI_COMMANDS[k % len(_CLI_COMMANDS)]
        subject = f"probe-{k}"
        argv = {
            "tail": ["audit", "tail", "-n", "5"],
            "search": ["audit", "search", "--subject", subject, "--limit", "5"],
            "export": ["audit", "export", str(self.work / f"export-{k}.jsonl"), "--first-seq", "1"],
            "verify": ["audit", "verify"],
        }[command]
        cli_delay = self.rng.uniform(0.0, 0.3)
        kill_after = self.rng.uniform(0.05, 0.6)
        stop = asyncio.Event()
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            workers = [asyncio.create_task(self._load(client, stop)) for _ in range(3)]
            await asyncio.sleep(cli_delay)
            cli = self.run_cli(argv)
            await asyncio.sleep(max(0.0, kill_after - cli_delay))
            os.kill(gateway.pid, signal.SIGKILL)
            self.outcome.num_kills += 1
            stop.set()
            await asyncio.gather(*workers)
        rc = await cli.wait()
        self.outcome.num_cli[command] = self.outcome.num_cli.get(command, 0) + 1
        if command in ("tail", "verify"):
            assert rc in (0, 3), f"{command} beside the gateway failed: {cli.log}"  # 3: stale, never bad
        elif rc == 0:
            self.outcome.audited_cli.append(subject if command == "search" else f"export-{k}.jsonl")

    async def _load(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        headers = {"authorization": f"Bearer {self.token}"}
        while not stop.is_set():
            is_stream = self.rng.random() < 0.3
            body = {"model": "demo-chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
            try:
                if not is_stream:
                    response = await client.post("/v1/chat/completions", json=body, headers=headers)
                    if response.status_code // 100 == 2:
                        self.outcome.answered[response.headers["x-request-id"]] = False
                    continue
                async with client.stream(
                    "POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers
                ) as response:
                    if response.status_code // 100 != 2:
                        continue
                    request_id = response.headers["x-request-id"]
                    self.outcome.answered[request_id] = False
                    async for line in response.aiter_lines():
                        if line == "data: [DONE]":
                            self.outcome.answered[request_id] = True
            except httpx.HTTPError:
                await asyncio.sleep(0.01)  # killed under us: nothing was answered

    # -- the checks --------------------------------------------------------------------------

    def check(self) -> int:
        """Everything the clients and operators were told is on the record; returns the record count."""
        store = SqliteStore.read_only(self.data / "audit" / "audit.db")
        store.open("")
        try:
            signer = CheckpointSigner.load(self.data / "keys" / "audit-signing-key.pem", create=False)
            report = verify_store(store, signer.verifier)
            assert report.ok, report.problem
            rows = [row for after in range(0, report.last_seq, 1000) for row in store.rows(after, 1000)]
        finally:
            store.close()
        assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
        reasons: dict[str, list[str]] = {}
        details = []
        for row in rows:
            event = json.loads(row.event)
            reasons.setdefault(event.get("request_id", ""), []).append(event.get("reason", ""))
            details.append(event.get("detail", ""))
        for request_id, reached_done in self.outcome.answered.items():
            assert request_id in reasons, f"answered request {request_id} has no record"
            if reached_done:
                assert any(r != "stream started" for r in reasons[request_id]), (
                    f"stream {request_id} reached [DONE] without its final record"
                )
        for mark in self.outcome.audited_cli:
            assert any(mark in d for d in details), f"CLI command {mark} exited 0 without its record"
        return len(rows)


@dataclass
class Gateway:
    pid: int
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient(timeout=1) as client:
            while True:
                if Path(f"{self.log}.rc").exists():
                    errors = [
                        ln for ln in self.log.read_text().splitlines() if "Error" in ln and "File" not in ln
                    ]
                    raise AssertionError(f"gateway {self.log.name} exited: {errors[-5:]}")
                try:
                    if (await client.get(f"{self.url}/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"gateway not ready:\n{self.log.read_text()[-3000:]}"
                await asyncio.sleep(0.02)


@dataclass
class CliRun:
    argv: list[str]
    pid: int
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    @property
    def rc(self) -> int:
        deadline = time.monotonic() + 120
        rc_path = Path(f"{self.log_path}.rc")
        while not rc_path.exists():
            assert time.monotonic() < deadline, f"{self.argv} did not finish"
            time.sleep(0.01)
        return int(rc_path.read_text() or "1")

    async def wait(self) -> int:
        return await asyncio.to_thread(lambda: self.rc)


def run(work: Path, *, iterations: int, seed: int) -> Outcome:
    with Harness(work, seed) as harness:

        async def go() -> None:
            gateway = harness.start_gateway()
            await gateway.wait_ready()  # the first start creates the keys; nothing else races it
            for k in range(iterations):
                following = harness.start_gateway()  # waits for the writer lock meanwhile
                await harness.iteration(gateway, k)
                harness.check()
                gateway = following
            await gateway.wait_ready()  # the last one recovers the last kill
            os.kill(gateway.pid, signal.SIGTERM)

        asyncio.run(go())
        harness.check()
        return harness.outcome


def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    iterations = int(os.environ.get("AUDIT_CRASH_ITERATIONS", "50"))
    seed = int(os.environ.get("AUDIT_CRASH_SEED", "17"))
    outcome = run(tmp_path, iterations=iterations, seed=seed)
    assert outcome.num_kills == iterations
    assert len(outcome.answered) > iterations  # the load really ran
    assert sum(outcome.answered.values()) > 0  # and some streams finished


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--dir", default=None, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    started = time.monotonic()
    out = run(
        Path(args.dir or tempfile.mkdtemp(prefix="audit-crash-")), iterations=args.iterations, seed=args.seed
    )
    print(
        json.dumps(
            {
                "iterations": args.iterations,
                "seed": args.seed,
                "kills": out.num_kills,
                "answered": len(out.answered),
                "streams_done": sum(out.answered.values()),
                "cli": out.num_cli,
                "cli_audited": len(out.audited_cli),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )
