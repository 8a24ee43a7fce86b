from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from bench.engine.random_model import build_random_qwen3
from bench.engine.throughput import RunResult, ratios, throughput
from bench.engine.workload import nano_vllm_workload

SCALE = 0.008  # 3 requests, prompts and outputs of about 1-8 tokens


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tiny_run_through_ours_and_hf_generate_writes_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = _Terminal()  # the progress bar goes to a terminal's stderr, never into the output
    monkeypatch.setattr("strongroom.progress_bar.sys", SimpleNamespace(stderr=terminal))
    model_dir = build_random_qwen3(tmp_path / "model", shape="tiny", dtype="float32")
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        throughput,
        [
            "--model",
            str(model_dir),
            "--scale",
            str(SCALE),
            "--systems",
            "ours,hf-generate",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    workload = nano_vllm_workload().scaled(SCALE)
    assert report["workload"]["num_output_tokens"] == workload.num_output_tokens
    assert [r["system"] for r in report["results"]] == ["ours", "hf-generate"]
    # ignore_eos: every system produced exactly the requested tokens.
    assert all(r["num_output_tokens"] == workload.num_output_tokens for r in report["results"])
    assert set(report["ratios"]) == {"ours/hf-generate"}
    assert report["errors"] == {}
    for key in ("command", "git_commit", "machine", "date"):
        assert report[key]
    assert "ours/hf-generate" in result.output
    assert "running 2 system(s)" in terminal.getvalue() and "100%" in terminal.getvalue()
    assert "running 2 system(s)" not in result.output


def test_unknown_system_is_rejected() -> None:
    result = CliRunner().invoke(throughput, ["--systems", "ours,vllm"])
    assert result.exit_code != 0
    assert "unknown systems" in result.output


def test_ratio_is_ours_over_each_peer() -> None:
    def run(system: str, tok_s: float) -> RunResult:
        return RunResult(system, 1.0, 1, 1, 1, tok_s, tok_s)

    assert ratios([run("ours", 300.0), run("hf-generate", 100.0), run("hf-continuous", 150.0)]) == {
        "ours/hf-generate": 3.0,
        "ours/hf-continuous": 2.0,
    }
    assert ratios([run("hf-generate", 100.0)]) == {}
