from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from bench.serving.metrics import RequestTiming, compare, compute_metrics
from bench.serving.report import format_comparison, format_sweep, redacted
from bench.serving.report import main as report_main


def test_ratios_read_times_better_than_the_peer() -> None:
    ours = compute_metrics(
        [
            RequestTiming(
                success=True, ttft_s=0.1, e2e_s=0.3, itl_s=(0.2,), num_output_tokens=2, num_prompt_tokens=3
            )
        ],
        duration_s=1.0,
    )
    peer = compute_metrics(
        [
            RequestTiming(
                success=True, ttft_s=0.4, e2e_s=0.6, itl_s=(0.2,), num_output_tokens=2, num_prompt_tokens=3
            )
        ],
        duration_s=4.0,
    )
    ratios = compare(ours, peer)
    assert ratios["output_throughput"] == pytest.approx(4.0)  # ours 2 tok/s, peer 0.5
    assert ratios["request_throughput"] == pytest.approx(4.0)
    assert ratios["ttft_median_ms"] == pytest.approx(4.0)  # peer 400 ms / ours 100 ms
    assert ratios["e2e_p99_ms"] == pytest.approx(2.0)
    assert ratios["itl_mean_ms"] == pytest.approx(1.0)
    assert ratios["tpot_p90_ms"] == pytest.approx(1.0)
    assert len(ratios) == 3 + 4 * 4


def test_a_side_that_measured_nothing_has_no_ratio() -> None:
    ours = compute_metrics(
        [RequestTiming(success=True, ttft_s=0.1, e2e_s=0.1, num_output_tokens=1, num_prompt_tokens=3)],
        duration_s=1.0,
    )
    peer = compute_metrics([RequestTiming(success=False, error="HTTP 500: boom")], duration_s=1.0)
    ratios = compare(ours, peer)
    assert ratios["output_throughput"] is None  # the peer completed nothing
    assert ratios["itl_mean_ms"] is None  # one token each: no gaps on either side
    table = format_comparison("ours", ours, "hf", peer, ratios)
    lines = table.splitlines()
    assert lines[1].split() == ["completed", "/", "failed", "1", "/", "0", "0", "/", "1"]
    itl = next(line for line in lines if line.startswith("ITL mean"))
    assert itl.split()[-1] == "-"
    ttft = next(line for line in lines if line.startswith("TTFT mean"))
    assert ttft.split()[3:] == ["100.00", "0.00", "-"]


def test_the_api_key_never_reaches_the_result_file() -> None:
    argv = ["serve", "--api-key", "sk-1", "--model", "m", "--api-key=sk-2", "--label", "x"]
    assert redacted(argv) == [
        "serve",
        "--api-key",
        "<redacted>",
        "--model",
        "m",
        "--api-key=<redacted>",
        "--label",
        "x",
    ]


def test_a_run_that_completed_nothing_exits_non_zero(tmp_path: object) -> None:
    """The README's `bench serve` against a server that refuses every request (here: nothing
    listens) used to print a table of zeros and exit 0."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.ports import free_port

    port = free_port()
    out = Path(str(tmp_path)) / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "strongroom",
            "bench",
            "serve",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            "demo-chat",
            "--scale",
            "0.01",
            "--warmup-requests",
            "0",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout
    assert "no request completed against" in done.stderr and "Traceback" not in done.stderr
    assert out.exists()  # the report of the failed run is still written


def _sweep_report(label: str, rate: float, tok_s: float) -> dict[str, object]:
    stat = {"mean_ms": 1.0, "median_ms": 1.0, "p90_ms": 2.0, "p99_ms": 3.0}
    metrics = {"num_completed": 8, "num_failed": 0, "num_output_tokens": 80, "output_throughput": tok_s,
               "ttft": stat, "tpot": stat}  # fmt: skip
    return {"label": label, "request_rate": rate, "metrics": metrics}


def test_a_sweep_of_both_policies_sets_them_against_each_other_and_the_offline_engine(tmp_path: Path) -> None:
    reports = [
        _sweep_report("strongroom-cuda-filters-default", 32, 900.0),
        _sweep_report("strongroom-cuda-filters-off", 32, 1000.0),
        _sweep_report("strongroom-cuda-filters-default", 8, 400.0),
    ]
    table = format_sweep(reports, offline_tok_s=2000.0)
    assert "x offline" in table
    row = next(
        line
        for line in table.splitlines()
        if line.startswith("strongroom-cuda-filters-default") and " 32" in line
    )
    assert row.split()[-1] == "0.45"  # 900 / 2000
    assert "rate 32: filters on / off output tok/s 0.90" in table
    assert "rate 8:" not in table  # no off run at 8 req/s to compare with
    assert "offline engine, same workload and checkpoint: 2000.0 output tok/s" in table
    # From files, as serve_gpu.sh calls it: the offline figure is bench.engine.throughput's "ours".
    paths = []
    for i, report in enumerate(reports):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(report))
    offline = tmp_path / "offline.json"
    offline.write_text(json.dumps({"results": [{"system": "ours", "output_tok_s": 2000.0}]}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report_main(["--offline", str(offline), *map(str, paths)])
    assert out.getvalue().strip() == table
