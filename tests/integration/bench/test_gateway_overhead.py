"""``strongroom bench gateway`` end to end at its smallest: both servers, one level, one round,
with the progress bar drawn on a terminal (``script`` gives the command one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.terminal import run_on_terminal

REPO = Path(__file__).resolve().parents[3]


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
