"""Gateway overhead: the same load through the full gateway and straight at the engine.

    load ──▶ gateway (JWT + RBAC + quota + filters + audit) ──▶ stub engine     "gateway"
    load ──────────────────────────────────────────────────────▶ stub engine     "direct"

The stub engine answers instantly, so the difference between the two is what the gateway adds.
Both paths run in this one invocation, at each concurrency level, for the same total time, in
alternating rounds (direct, gateway, direct, ...) so that a noisy neighbour on a shared machine
hits both alike. The load generator is a closed loop of keep-alive HTTP/1.1 connections, one per
concurrent caller, sending pre-encoded requests: on a 2-core machine it shares the cores with
the gateway and the engine, so it has to cost far less than what it measures. The figures are
honest upper bounds on overhead, not best cases. Where /proc exists, the CPU time the gateway
and the engine processes spent per request is recorded too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx
import msgspec

from bench.provenance import git_commit, machine
from engine.core.sampling_params import SamplingParams
from engine.serving.protocol import GenerateRequest
from strongroom.progress_bar import ProgressBar

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _free_ports(count: int) -> tuple[int, ...]:
    """``count`` distinct free loopback ports. All stay bound until all are chosen: a port closed
    at once may come back from the very next bind to port 0."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return tuple(int(s.getsockname()[1]) for s in socks)


def _free_port() -> int:
    return _free_ports(1)[0]


def _wait(url: str, headers: dict[str, str] | None = None, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def stub_engine(
    env: dict[str, str], port: int, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``strongroom engine --stub`` on ``port``, answering health once this returns, with the
    engine token ``env`` holds (``bench_env`` sets it); stopped on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom", "engine", "--stub", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        token = env["STRONGROOM_ENGINE_TOKEN"]
        _wait(f"http://127.0.0.1:{port}/engine/v1/health", {"authorization": f"Bearer {token}"})
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _LoadConnection:
    """One keep-alive HTTP/1.1 connection sending a fixed, pre-encoded request.

    The load generator shares two cores with the gateway and the engine, so it must cost far
    less than what it measures: httpx spends ~1.5 ms of CPU per request here and its pool
    degrades with many concurrent requests. This client writes the request bytes, reads the
    status line and headers, and drains a ``content-length`` or chunked body. Nothing more.
    """

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self._host, self._port, self._request = host, port, request
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def send(self) -> int:
        """One request and its whole response; returns the HTTP status."""
        if self._writer is None or self._reader is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        reader = self._reader
        self._writer.write(self._request)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            status = int(head[9:12])
            if b"transfer-encoding: chunked" in head:
                while size := int((await reader.readline()).split(b";")[0], 16):
                    await reader.readexactly(size + 2)
                await reader.readexactly(2)
            else:
                _, _, rest = head.partition(b"content-length:")
                await reader.readexactly(int(rest.split(b"\r\n")[0]))
        except BaseException:
            self.close()
            raise
        if b"connection: close" in head:
            self.close()
        return status

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _post(path: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"host: {host}", f"content-length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Samples:
    """Latencies and failures of one path at one concurrency, over all its rounds."""

    def __init__(self, tokens_per_request: int = 0) -> None:
        self.tokens_per_request = tokens_per_request
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.elapsed_s = 0.0
        self.cpu_s: dict[str, float] = {}

    def summary(self) -> dict[str, Any]:
        if not self.latencies:
            raise RuntimeError(f"no request succeeded: {self.errors}")
        n = len(self.latencies)
        return {
            "requests": n,
            "errors": sum(self.errors.values()),
            "errors_by_kind": self.errors,
            "rps": n / self.elapsed_s,
            "p50_ms": statistics.median(self.latencies) * 1000,
            "p99_ms": _percentile(self.latencies, 0.99) * 1000,
            "mean_ms": statistics.fmean(self.latencies) * 1000,
            **{f"{name}_cpu_ms_per_request": cpu / n * 1000 for name, cpu in self.cpu_s.items()},
            **{
                f"{name}_cpu_ms_per_token": cpu / (n * self.tokens_per_request) * 1000
                for name, cpu in self.cpu_s.items()
                if self.tokens_per_request
            },
        }


async def _drive(
    url: str, request: bytes | Callable[[int], bytes], concurrency: int, duration_s: float, into: _Samples
) -> None:
    """``concurrency`` closed-loop workers, one connection each, for ``duration_s``; each sends the
    same ``request`` again and again (worker i ``request(i)``, for requests that must differ)."""
    host, _, port = url.removeprefix("http://").partition(":")
    stop_at = time.perf_counter() + duration_s

    async def worker(i: int) -> None:
        conn = _LoadConnection(host, int(port), request if isinstance(request, bytes) else request(i))
        try:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    status = await conn.send()
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    into.errors[type(exc).__name__] = into.errors.get(type(exc).__name__, 0) + 1
                    continue
                if status != 200:
                    into.errors[str(status)] = into.errors.get(str(status), 0) + 1
                    continue
                into.latencies.append(time.perf_counter() - t0)
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    into.elapsed_s += time.perf_counter() - started


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all its threads), or None without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where installed (as uvicorn uses for both servers), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _chat_body(max_tokens: int, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "demo-chat",
        "messages": [{"role": "user", "content": "What is the rate on a fixed deposit?"}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return body


def _check_gateway_answer(gateway: str, token: str, body: dict[str, Any]) -> None:
    """One request through the whole path before timing: the load must be served, not refused."""
    r = httpx.post(
        f"{gateway}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}, timeout=10
    )
    r.raise_for_status()
    if "hello" not in r.json()["choices"][0]["message"]["content"]:
        raise RuntimeError(f"unexpected gateway answer: {r.text[:200]}")


async def _measure(
    gateway: str,
    engine: str,
    engine_token: str,
    token: str,
    levels: list[int],
    duration_s: float,
    max_tokens: int,
    *,
    rounds: int,
    stream: bool,
    pids: dict[str, int],
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    json_type = {"content-type": "application/json"}
    via_gateway = _post(
        "/v1/chat/completions",
        gateway.removeprefix("http://"),
        {"authorization": f"Bearer {token}", **json_type},
        msgspec.json.encode(_chat_body(max_tokens, stream=stream)),
    )

    def to_engine(worker: int) -> bytes:
        # An engine runs one request of an id at a time: each caller has its own.
        direct = GenerateRequest(
            request_id=f"bench-{worker}",
            model="demo-chat",
            prompt="What is the rate on a fixed deposit?",
            params=SamplingParams(max_tokens=max_tokens),
        )
        headers = {"authorization": f"Bearer {engine_token}", **json_type}
        return _post(
            "/engine/v1/generate", engine.removeprefix("http://"), headers, msgspec.json.encode(direct)
        )

    paths: dict[str, tuple[str, bytes | Callable[[int], bytes]]] = {
        "direct": (engine, to_engine),
        "gateway": (gateway, via_gateway),
    }
    rows = []
    steps, done = len(levels) * rounds * len(paths), 0
    for level in levels:
        scratch = _Samples()
        for url, request in paths.values():  # warm-up: connections, pools, caches
            await _drive(url, request, level, min(1.0, duration_s / 2), scratch)
        samples = {name: _Samples(max_tokens) for name in paths}
        for _ in range(rounds):
            for name, (url, request) in paths.items():
                before = {proc: _cpu_seconds(pid) for proc, pid in pids.items()}
                await _drive(url, request, level, duration_s / rounds, samples[name])
                for proc, pid in pids.items():
                    start, end = before[proc], _cpu_seconds(pid)
                    if start is not None and end is not None:
                        samples[name].cpu_s[proc] = samples[name].cpu_s.get(proc, 0.0) + end - start
                done += 1
                if progress is not None:
                    progress(done, steps)
        d, g = samples["direct"].summary(), samples["gateway"].summary()
        rows.append(
            {
                "concurrency": level,
                "direct": d,
                "gateway": g,
                "added_p50_ms": g["p50_ms"] - d["p50_ms"],
                "added_p99_ms": g["p99_ms"] - d["p99_ms"],
            }
        )
    return rows


def bench_token(env: dict[str, str]) -> str:
    """A two-hour analyst token from the dev issuer of the gateway that ``env`` configures."""
    return subprocess.run(
        [sys.executable, "-m", "strongroom", "token", "--sub", "bench", "--role", "analyst", "--ttl", "7200"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def bench_env(data_dir: Path, engine_token: str, engine_port: int, *, filters: bool = True) -> dict[str, str]:
    """The environment of a benchmarked gateway over the stub engine at ``engine_port``: HTTP
    only (gRPC off: runs side by side would share its port), the packaged filters or none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env.update(
        {
            "STRONGROOM_DATA_DIR": str(data_dir),
            "STRONGROOM_ENGINE_TOKEN": engine_token,
            "STRONGROOM_SERVER__ENGINE_URLS": f'["http://127.0.0.1:{engine_port}"]',
            # The default per-subject limits would cap a load test; overhead is what we measure.
            "STRONGROOM_QUOTA__DEFAULT": "{ requests_per_minute = 100000000, tokens_per_minute = 1000000000, concurrent_requests = 100000, max_tokens_ceiling = 4096 }",
            "STRONGROOM_GRPC__ENABLED": "false",
        }
    )
    if not filters:
        env["STRONGROOM_FILTERS__POLICY_FILE"] = f'"{filters_off_policy(data_dir)}"'
    return env


def redis_env(prefix: str) -> dict[str, str]:
    """Quotas, revocations and policy reloads in the local Redis, under keys of their own."""
    return {
        "STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/0",
        "STRONGROOM_QUOTA__KEY_PREFIX": f"{prefix}:quota",
        "STRONGROOM_AUTH__REVOCATION_KEY_PREFIX": f"{prefix}:revoked:",
        "STRONGROOM_ACCESS__CHANNEL": f"{prefix}:policy",
    }


def filters_off_policy(data_dir: Path) -> Path:
    """The packaged policy with every detector off, as bench/serve_gpu.sh uses it."""
    policy = data_dir / "filters-off.toml"
    policy.write_text('version = 1\ndefault_action = "off"\non_error = "block"\n')
    return policy


def write_record(
    benchmark: str,
    load_before: tuple[float, ...],
    config: dict[str, Any],
    result: dict[str, Any],
    output: Path | None,
) -> Path:
    """The result with its provenance, as JSON (default: bench/results/<benchmark>_<time>.json)."""
    stamp = datetime.now(UTC)
    record = {
        "benchmark": benchmark,
        "command": " ".join(["strongroom", "bench", "gateway", *sys.argv[3:]]),
        "git_commit": git_commit(),
        "machine": machine("cpu"),
        "date": stamp.isoformat(timespec="seconds"),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "config": config,
        **result,
    }
    out = output or RESULTS / f"{benchmark}_{stamp:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    return out


def run(
    levels: list[int],
    duration_s: float,
    max_tokens: int,
    data_dir: Path,
    *,
    rounds: int = 5,
    stream: bool = False,
    filters: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Start a stub engine and a gateway, then measure; ``progress`` is told (runs done, runs in all)."""
    engine_token = secrets.token_urlsafe(24)
    engine_port, gw_port = _free_ports(2)
    env = bench_env(data_dir, engine_token, engine_port, filters=filters)
    env["STRONGROOM_SERVER__PORT"] = str(gw_port)
    cmd = [sys.executable, "-m", "strongroom"]
    with stub_engine(env, engine_port) as engine:
        gateway = subprocess.Popen(
            [*cmd, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait(f"http://127.0.0.1:{gw_port}/readyz")
            token = bench_token(env)
            _check_gateway_answer(f"http://127.0.0.1:{gw_port}", token, _chat_body(max_tokens))
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                rows = runner.run(
                    _measure(
                        f"http://127.0.0.1:{gw_port}",
                        f"http://127.0.0.1:{engine_port}",
                        engine_token,
                        token,
                        levels,
                        duration_s,
                        max_tokens,
                        rounds=rounds,
                        stream=stream,
                        pids={"engine": engine.pid, "gateway": gateway.pid},
                        progress=progress,
                    )
                )
        finally:
            gateway.terminate()
            gateway.wait(timeout=20)
    return {"rows": rows, "rounds": rounds, "stream": stream, "filters": filters}


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [
        "conc | direct p50/p99 ms | gateway p50/p99 ms | added p50/p99 ms | direct rps | gateway rps"
        " | gateway CPU ms/req | gateway CPU ms/token",
        "-----|-------------------|--------------------|------------------|------------|------------"
        "|--------------------|--------------------",
    ]
    for r in rows:
        d, g = r["direct"], r["gateway"]
        cpu = g.get("gateway_cpu_ms_per_request")
        per_token = g.get("gateway_cpu_ms_per_token")
        lines.append(
            f"{r['concurrency']:>4} | {d['p50_ms']:7.2f} / {d['p99_ms']:7.2f} | {g['p50_ms']:7.2f} / {g['p99_ms']:8.2f} "
            f"| {r['added_p50_ms']:6.2f} / {r['added_p99_ms']:7.2f} | {d['rps']:10.0f} | {g['rps']:10.0f} "
            f"| {'n/a' if cpu is None else f'{cpu:.2f}':>18} "
            f"| {'n/a' if per_token is None else f'{per_token:.4f}':>19}"
        )
    return "\n".join(lines)


@click.command("gateway")
@click.option("--concurrency", "levels", multiple=True, type=int, default=(1, 32), show_default=True)
@click.option(
    "--duration",
    "duration_s",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds per path and level, split into alternating rounds.",
)
@click.option("--rounds", type=int, default=5, show_default=True, help="Alternations of the two paths.")
@click.option("--max-tokens", type=int, default=4, show_default=True)
@click.option("--stream", is_flag=True, help="Streamed completions (SSE): the per-token path.")
@click.option("--filters/--no-filters", default=True, show_default=True, help="Content filters on or off.")
@click.option(
    "--output", type=click.Path(path_type=Path), default=None, help="JSON file (default bench/results/)."
)
@click.option(
    "--workers",
    "worker_counts",
    default=None,
    help="Instead: requests/s and CPU per request and token at these gateway worker counts, in one "
    'run (comma-separated; "all" is one per core), e.g. "1,2,all". Needs Redis on 127.0.0.1:6379.',
)
def gateway(
    levels: tuple[int, ...],
    duration_s: float,
    rounds: int,
    max_tokens: int,
    stream: bool,
    filters: bool,
    output: Path | None,
    worker_counts: str | None,
) -> None:
    """Added latency and sustained requests/s of the full gateway over a stub engine."""
    if worker_counts is not None:
        from bench.gateway.scaling import scaling

        scaling(
            worker_counts,
            list(levels),
            duration_s,
            rounds,
            max_tokens,
            output,
            stream=stream,
            filters=filters,
        )
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strongroom-bench-") as tmp, ProgressBar("measuring") as bar:
        result = run(
            list(levels),
            duration_s,
            max_tokens,
            Path(tmp),
            rounds=rounds,
            stream=stream,
            filters=filters,
            progress=bar,
        )
    config = {
        "levels": list(levels),
        "duration_s": duration_s,
        "max_tokens": max_tokens,
        "rounds": rounds,
        "stream": stream,
        "filters": filters,
        "load_generator": "closed loop, one keep-alive HTTP/1.1 connection per concurrent caller",
        "path": "JWT (EdDSA) + RBAC + quota (in-process) + "
        + ("request/response filters + " if filters else "filters off + ")
        + "audit (SQLite)",
    }
    click.echo(format_rows(result["rows"]))
    out = write_record("gateway_overhead", load_before, config, result, output)
    click.echo(f"wrote {out}")
