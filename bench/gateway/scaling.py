"""Gateway scaling over worker processes: the same load at 1, 2, ... and all workers, in one run.

    load ──▶ strongroom serve (server.workers = n: supervisor + n workers) ──▶ stub engine

One stub engine for the whole run; a fresh gateway for each worker count, every one with Redis
(quotas and revocations live there once there are several workers, so the one-worker point pays
for it too and the counts differ only in processes). Each count is measured in ``rounds``
alternating slices with the others (1, 2, all, 1, 2, all, ...) so that a neighbour's load on a
shared machine falls on every count alike. CPU is the gateway's whole process tree (supervisor,
which writes the audit log, plus workers) and the engine, from /proc, per request and per
completion token; the supervisor's share also on its own (``gateway_supervisor``: with several
workers, the audit owner; with one, the whole gateway). ``bench.gateway.workers_profile`` splits
each process further.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import msgspec

from bench.gateway.overhead import (
    _chat_body,
    _check_gateway_answer,
    _cpu_seconds,
    _drive,
    _free_port,
    _loop_factory,
    _post,
    _Samples,
    _wait,
    bench_env,
    bench_token,
    redis_env,
    stub_engine,
    write_record,
)
from strongroom.progress_bar import ProgressBar

__all__ = ["format_scaling", "run_scaling", "scaling"]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextlib.contextmanager
def _gateway(env: dict[str, str], workers: int, engine_pid: int) -> Iterator[tuple[str, list[int], str]]:
    """A ``strongroom serve`` with ``workers`` workers and its own data directory (one audit writer
    each); yields its URL, its process tree's pids and a token its dev issuer signed."""
    port = _free_port()
    data_dir = Path(env["STRONGROOM_DATA_DIR"]) / f"workers-{workers}"
    env = {
        **env,
        "STRONGROOM_DATA_DIR": str(data_dir),
        "STRONGROOM_SERVER__PORT": str(port),
        "STRONGROOM_SERVER__WORKERS": str(workers),
    }
    cmd = [sys.executable, "-m", "strongroom"]
    proc = subprocess.Popen([*cmd, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{port}/readyz")
        token = bench_token(env)
        pids = [proc.pid, *(p for p in _children(proc.pid) if p != engine_pid)]
        yield f"http://127.0.0.1:{port}", pids, token
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def run_scaling(
    worker_counts: list[int],
    levels: list[int],
    duration_s: float,
    max_tokens: int,
    data_dir: Path,
    *,
    rounds: int = 3,
    stream: bool = False,
    filters: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    engine_token = secrets.token_urlsafe(24)
    engine_port = _free_port()
    prefix = f"bench-{uuid.uuid4().hex}"
    env = bench_env(data_dir, engine_token, engine_port, filters=filters)
    env.update(redis_env(prefix))
    samples = {(n, level): _Samples() for n in worker_counts for level in levels}
    others = dict.fromkeys(samples, 0.0)
    """CPU seconds the rest of the machine used while each was measured (a shared machine)."""
    body = msgspec.json.encode(_chat_body(max_tokens, stream=stream))
    steps, done = rounds * len(samples), 0
    with (
        stub_engine(env, engine_port) as engine,
        contextlib.ExitStack() as stack,
        asyncio.Runner(loop_factory=_loop_factory()) as runner,
    ):
        gateways = {n: stack.enter_context(_gateway(env, n, engine.pid)) for n in worker_counts}
        for url, _, token in gateways.values():
            _check_gateway_answer(url, token, _chat_body(max_tokens))
        for level in levels:
            for _ in range(rounds):
                for n, (url, pids, token) in gateways.items():
                    request = _post(
                        "/v1/chat/completions",
                        url.removeprefix("http://"),
                        {"authorization": f"Bearer {token}", "content-type": "application/json"},
                        body,
                    )
                    into = samples[(n, level)]
                    if not into.latencies:  # warm-up: connections, caches
                        runner.run(_drive(url, request, level, min(1.0, duration_s / 4), _Samples()))
                    tree = {"gateway": pids, "engine": [engine.pid], "load_generator": [os.getpid()]}
                    # Part of "gateway", also on its own: with several workers, the audit owner.
                    parts = {**tree, "gateway_supervisor": pids[:1]}
                    before = {name: _tree_cpu(ps) for name, ps in parts.items()}
                    busy_before = _machine_busy_s()
                    runner.run(_drive(url, request, level, duration_s / rounds, into))
                    for name, ps in parts.items():
                        into.cpu_s[name] = into.cpu_s.get(name, 0.0) + _tree_cpu(ps) - before[name]
                    ours = sum(_tree_cpu(ps) - before[name] for name, ps in tree.items())
                    others[(n, level)] += _machine_busy_s() - busy_before - ours
                    done += 1
                    if progress is not None:
                        progress(done, steps)
    rows = []
    for level in levels:
        base = samples[(worker_counts[0], level)].summary()["rps"]
        for n in worker_counts:
            s = samples[(n, level)].summary()
            per_req = s.get("gateway_cpu_ms_per_request", 0.0)
            rows.append(
                {
                    "workers": n,
                    "concurrency": level,
                    **s,
                    "gateway_cpu_ms_per_token": per_req / max_tokens,
                    "rps_vs_first": s["rps"] / base,
                    "other_cpu_cores": max(0.0, others[(n, level)]) / samples[(n, level)].elapsed_s,
                }
            )
    return {"rows": rows, "rounds": rounds, "max_tokens": max_tokens, "stream": stream, "filters": filters}


def _machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(pids: list[int]) -> float:
    return sum(cpu for cpu in map(_cpu_seconds, pids) if cpu is not None)


def format_scaling(rows: list[dict[str, Any]]) -> str:
    lines = [
        "workers | conc | gateway rps | x first | p50 / p99 ms | gateway CPU ms/req | ms/token | engine CPU ms/req"
        " | others' cores",
        "--------|------|-------------|---------|--------------|--------------------|----------|------------------"
        "|--------------",
    ]
    for r in rows:
        lines.append(
            f"{r['workers']:>7} | {r['concurrency']:>4} | {r['rps']:11.0f} | {r['rps_vs_first']:7.2f} "
            f"| {r['p50_ms']:5.2f} / {r['p99_ms']:5.2f} | {r.get('gateway_cpu_ms_per_request', 0):18.3f} "
            f"| {r['gateway_cpu_ms_per_token']:8.4f} | {r.get('engine_cpu_ms_per_request', 0):17.3f}"
            f" | {r['other_cpu_cores']:13.2f}"
        )
    return "\n".join(lines)


def worker_counts(text: str) -> list[int]:
    """``"1,2,all"`` as distinct counts, in order; "all" is one per core."""
    counts: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        n = (os.cpu_count() or 1) if part == "all" else int(part) if part.isdigit() else 0
        if n < 1:
            raise click.BadParameter(f"{part!r} is not a worker count (>= 1, or all)", param_hint="--workers")
        if n not in counts:
            counts.append(n)
    return counts


def scaling(
    counts_text: str,
    levels: list[int],
    duration_s: float,
    rounds: int,
    max_tokens: int,
    output: Path | None,
    *,
    stream: bool = False,
    filters: bool = True,
) -> None:
    """``strongroom bench gateway --workers``: measure, print, write bench/results/gateway_workers_*.json."""
    counts = worker_counts(counts_text)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strongroom-bench-") as tmp, ProgressBar("measuring") as bar:
        result = run_scaling(
            counts,
            levels,
            duration_s,
            max_tokens,
            Path(tmp),
            rounds=rounds,
            stream=stream,
            filters=filters,
            progress=bar,
        )
    config = {
        "worker_counts": counts,
        "levels": levels,
        "duration_s": duration_s,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "stream": stream,
        "filters": filters,
        "load_generator": "closed loop, one keep-alive HTTP/1.1 connection per concurrent caller",
        "path": "JWT (EdDSA) + RBAC + quota (Redis) + "
        + ("request/response filters + " if filters else "filters off + ")
        + "audit (SQLite, one writer)",
    }
    click.echo(format_scaling(result["rows"]))
    click.echo(f"wrote {write_record('gateway_workers', load_before, config, result, output)}")
