"""The audit stage of a request end to end: sequential chat completions through ``serve``.

    .venv/bin/python -m bench.audit.gateway_stage [--requests 400] [--rounds 2]
        [--trees A_DIR,B_DIR] [--out PATH]

Starts a stub engine and one gateway worker per tree (``--trees``: source trees to serve from,
e.g. an export of main and this branch; default this tree), sends ``--requests`` plain chat
completions one after another over one keep-alive connection, and reads the mean of every
``strongroom:gateway_stage_seconds`` series from /metrics before and after (so the warm-up is
left out). With several trees, rounds alternate between them (A, B, A, B, ...) on fresh data
dirs, so that a noisy neighbour hits both alike. Writes bench/results/audit_gateway_stage.json.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx

from bench.audit.throughput import CpuShare
from bench.gateway.overhead import _chat_body, _free_ports, _wait, bench_env, bench_token, stub_engine
from bench.provenance import git_commit

_REPO = Path(__file__).resolve().parents[2]
_SERIES = re.compile(r"^strongroom:gateway_stage_seconds_(sum|count)\{([^}]*)\} (\S+)$", re.MULTILINE)


def _stage_totals(gateway: str) -> dict[str, list[float]]:
    """Per stage: [seconds summed, observations], over every model label."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for kind, labels, value in _SERIES.findall(httpx.get(f"{gateway}/metrics", timeout=10).text):
        stage = re.search(r'stage="([^"]*)"', labels)
        if stage is not None:
            totals[stage.group(1)][kind == "count"] += float(value)
    return totals


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # written in one call, but not atomically


def _one_round(tree: Path, num_requests: int, *, profile: bool = False) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="audit-stage-"))
    profile_out = data_dir / "profile.json"
    engine_token = secrets.token_urlsafe(24)
    engine_port, gw_port = _free_ports(2)
    env = bench_env(data_dir, engine_token, engine_port) | {
        "STRONGROOM_SERVER__PORT": str(gw_port),
        "PYTHONPATH": str(tree),
        "AUDIT_PROFILE_OUT": str(profile_out),
    }
    cmd = [sys.executable, "-m", "strongroom"]
    quiet = {"env": env, "cwd": tree, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    gateway = f"http://127.0.0.1:{gw_port}"
    with stub_engine(env, engine_port, cwd=tree):
        serve = [sys.executable, "-m", "bench.audit.gateway_profile"] if profile else cmd
        proc = subprocess.Popen([*serve, "serve"], **quiet)  # type: ignore[call-overload]
        try:
            _wait(f"{gateway}/readyz")
            token = bench_token(env)
            headers = {"authorization": f"Bearer {token}"}
            body = _chat_body(16)
            with httpx.Client(base_url=gateway, headers=headers, timeout=10) as client:
                for _ in range(50):  # warm-up: imports, first connections, caches
                    client.post("/v1/chat/completions", json=body).raise_for_status()
                before = _stage_totals(gateway)
                if profile:
                    proc.send_signal(signal.SIGUSR1)
                    time.sleep(0.5)
                cpu = CpuShare()
                latencies = []
                for _ in range(num_requests):
                    t0 = time.perf_counter()
                    client.post("/v1/chat/completions", json=body).raise_for_status()
                    latencies.append(time.perf_counter() - t0)
                share = cpu.summary()
                after = _stage_totals(gateway)
                if profile:
                    proc.send_signal(signal.SIGUSR2)
                    _wait_for(profile_out)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    report = json.loads(profile_out.read_text()) if profile else None
    shutil.rmtree(data_dir, ignore_errors=True)
    stages = {}
    for stage, (total, count) in after.items():
        n = count - before[stage][1]
        if n > 0:
            stages[stage] = {"mean_ms": round((total - before[stage][0]) / n * 1e3, 4), "num": int(n)}
    latencies.sort()
    return {
        **({"audit_profile": report} if report is not None else {}),
        "tree": str(tree),
        "stages": stages,
        "request_p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
        "request_mean_ms": round(sum(latencies) / len(latencies) * 1e3, 3),
        **share,
    }


@click.command()
@click.option("--requests", "num_requests", default=400, show_default=True)
@click.option("--rounds", default=2, show_default=True, help="rounds per tree, alternated")
@click.option("--trees", default=str(_REPO), show_default=True, help="comma-separated source trees")
@click.option(
    "--profile", is_flag=True, help="stage profile of the audit record (bench.audit.gateway_profile)"
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=_REPO / "bench/results/audit_gateway_stage.json"
)
def main(num_requests: int, rounds: int, trees: str, profile: bool, out: Path) -> None:
    runs = []
    for i in range(rounds):
        for tree in trees.split(","):
            run = _one_round(Path(tree).resolve(), num_requests, profile=profile)
            run["round"] = i + 1
            runs.append(run)
            click.echo(
                f"round {i + 1} {tree}: audit {run['stages']['audit']['mean_ms']} ms/record "
                f"({run['stages']['audit']['num']} records), request p50 {run['request_p50_ms']} ms, "
                f"other cpu {run['other_cpu_cores']}"
            )
    result = {
        "benchmark": "audit_gateway_stage",
        "command": " ".join([".venv/bin/python -m bench.audit.gateway_stage", *sys.argv[1:]]),
        "commit": git_commit(),
        "requests_per_round": num_requests,
        "runs": runs,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
