"""``strongroom bench gateway`` end to end at its smallest: both servers, one level, one round,
with the progress bar drawn on a terminal (``script`` gives the command one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.terminal import run_on_terminal

REPO = Path(__file__).resolve().parents[4]


def test_smallest_run_writes_rows_and_draws_its_bar_on_a_terminal(tmp_path: Path) -> None:
    out = tmp_path / "gw.json"
    args = [
        "bench",
        "gateway",
        "--concurrency",
        "1",
        "--duration",
        "0.4",
        "--rounds",
        "1",
        "--output",
        str(out),
    ]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TERM": "dumb", "COLUMNS": "100"}
    done = run_on_terminal([sys.executable, "-m", "strongroom", *args], env, timeout=120)
    assert "measuring" in done.stdout and "100%" in done.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert row["concurrency"] == 1 and row["direct"]["rps"] > 0 and row["gateway"]["rps"] > 0


def test_workers_run_measures_each_worker_count_in_one_run(tmp_path: Path) -> None:
    out = tmp_path / "workers.json"
    args = [
        "bench",
        "gateway",
        "--workers",
        "1,2",
        "--concurrency",
        "4",
        "--duration",
        "0.4",
        "--rounds",
        "1",
    ]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TERM": "dumb", "COLUMNS": "100"}
    done = run_on_terminal(
        [sys.executable, "-m", "strongroom", *args, "--output", str(out)], env, timeout=180
    )
    assert "100%" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["workers"], r["concurrency"]) for r in rows] == [(1, 4), (2, 4)]
    assert all(r["rps"] > 0 and r["gateway_cpu_ms_per_token"] > 0 for r in rows)
    assert rows[0]["rps_vs_first"] == 1.0
    # The supervisor (with two workers, the audit owner) is part of the gateway's CPU, and on its own.
    assert all(
        0 < r["gateway_supervisor_cpu_ms_per_request"] <= r["gateway_cpu_ms_per_request"] for r in rows
    )
    assert rows[0]["gateway_supervisor_cpu_ms_per_request"] == rows[0]["gateway_cpu_ms_per_request"]
