"""Gateway overhead: the same load through the full gateway and straight at the engine.

    load ──▶ gateway (JWT + RBAC + quota + filters + audit) ──▶ stub engine     "gateway"
    load ──────────────────────────────────────────────────────▶ stub engine     "direct"

The stub engine answers instantly, so the difference between the two is what the gateway adds.
Both paths run in this one invocation, at each concurrency level, for the same duration.
On a 2-core machine the load generator, the gateway and the engine share the cores: the
figures are honest upper bounds on overhead, not best cases.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx
import msgspec

from bench.provenance import git_commit, machine
from engine.protocol import GenerateRequest
from engine.sampling_params import SamplingParams

RESULTS = Path(__file__).resolve().parent / "results"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _drive(
    send: Callable[[], Awaitable[None]], concurrency: int, duration_s: float
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + duration_s

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            try:
                await send()
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    if not latencies:
        raise RuntimeError("no request succeeded")
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
    }


async def _measure(
    gateway: str,
    engine: str,
    engine_token: str,
    token: str,
    levels: list[int],
    duration_s: float,
    max_tokens: int,
) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=max(levels) * 2, max_keepalive_connections=max(levels) * 2)
    body = {
        "model": "demo-chat",
        "messages": [{"role": "user", "content": "What is the rate on a fixed deposit?"}],
        "max_tokens": max_tokens,
    }
    direct = msgspec.json.encode(
        GenerateRequest(
            request_id="bench",
            model="demo-chat",
            prompt="What is the rate on a fixed deposit?",
            params=SamplingParams(max_tokens=max_tokens),
        )
    )
    rows = []
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        gw_headers = {"authorization": f"Bearer {token}"}
        en_headers = {"authorization": f"Bearer {engine_token}", "content-type": "application/json"}

        async def via_gateway() -> None:
            r = await http.post(f"{gateway}/v1/chat/completions", json=body, headers=gw_headers)
            r.raise_for_status()

        async def to_engine() -> None:
            r = await http.post(f"{engine}/engine/v1/generate", content=direct, headers=en_headers)
            r.raise_for_status()

        for level in levels:
            await _drive(via_gateway, level, min(2.0, duration_s))  # warm-up
            d = await _drive(to_engine, level, duration_s)
            g = await _drive(via_gateway, level, duration_s)
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


def run(levels: list[int], duration_s: float, max_tokens: int, data_dir: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    engine_token = secrets.token_urlsafe(24)
    engine_port, gw_port = _free_port(), _free_port()
    env.update(
        {
            "STRONGROOM_DATA_DIR": str(data_dir),
            "STRONGROOM_ENGINE_TOKEN": engine_token,
            "STRONGROOM_SERVER__PORT": str(gw_port),
            "STRONGROOM_SERVER__ENGINE_URLS": f'["http://127.0.0.1:{engine_port}"]',
            # The default per-subject limits would cap a load test; overhead is what we measure.
            "STRONGROOM_QUOTA__DEFAULT": "{ requests_per_minute = 100000000, tokens_per_minute = 1000000000, concurrent_requests = 100000, max_tokens_ceiling = 4096 }",
        }
    )
    cmd = [sys.executable, "-m", "strongroom"]
    procs = [
        subprocess.Popen(
            [*cmd, "engine", "--stub", "--port", str(engine_port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait(f"http://127.0.0.1:{engine_port}/engine/v1/health", {"authorization": f"Bearer {engine_token}"})
        procs.append(
            subprocess.Popen([*cmd, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait(f"http://127.0.0.1:{gw_port}/readyz")
        token = subprocess.run(
            [*cmd, "token", "--sub", "bench", "--role", "analyst", "--ttl", "7200"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        rows = asyncio.run(
            _measure(
                f"http://127.0.0.1:{gw_port}",
                f"http://127.0.0.1:{engine_port}",
                engine_token,
                token,
                levels,
                duration_s,
                max_tokens,
            )
        )
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
    return {"rows": rows}


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [
        "conc | direct p50/p99 ms | gateway p50/p99 ms | added p50/p99 ms | direct rps | gateway rps",
        "-----|-------------------|--------------------|------------------|------------|------------",
    ]
    for r in rows:
        d, g = r["direct"], r["gateway"]
        lines.append(
            f"{r['concurrency']:>4} | {d['p50_ms']:7.2f} / {d['p99_ms']:7.2f} | {g['p50_ms']:7.2f} / {g['p99_ms']:8.2f} "
            f"| {r['added_p50_ms']:6.2f} / {r['added_p99_ms']:7.2f} | {d['rps']:10.0f} | {g['rps']:10.0f}"
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
    help="Seconds per path and level.",
)
@click.option("--max-tokens", type=int, default=4, show_default=True)
@click.option(
    "--output", type=click.Path(path_type=Path), default=None, help="JSON file (default bench/results/)."
)
def gateway(levels: tuple[int, ...], duration_s: float, max_tokens: int, output: Path | None) -> None:
    """Added latency and sustained requests/s of the full gateway over a stub engine."""
    with tempfile.TemporaryDirectory(prefix="strongroom-bench-") as tmp:
        result = run(list(levels), duration_s, max_tokens, Path(tmp))
    stamp = datetime.now(UTC)
    record = {
        "benchmark": "gateway_overhead",
        "command": " ".join(["strongroom", "bench", "gateway", *sys.argv[3:]]),
        "git_commit": git_commit(),
        "machine": machine("cpu"),
        "date": stamp.isoformat(timespec="seconds"),
        "config": {
            "levels": list(levels),
            "duration_s": duration_s,
            "max_tokens": max_tokens,
            "path": "JWT (EdDSA) + RBAC + quota (in-process) + request/response filters + audit (SQLite)",
        },
        **result,
    }
    click.echo(format_rows(result["rows"]))
    out = output or RESULTS / f"gateway_overhead_{stamp:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    click.echo(f"wrote {out}")
