"""The tensor-parallel benchmark's CPU smoke run: every size answers, with the same greedy tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.engine.tensor_parallel import tensor_parallel
from bench.engine.workload import nano_vllm_workload

SCALE = 0.008


@pytest.mark.timeout(120)
def test_tiny_shape_at_tp_1_and_4_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "tp.json"
    args = ["--shape", "tiny", "--tp", "1,4", "--new-tokens", "4", "--throughput-scale", str(SCALE)]
    result = CliRunner().invoke(tensor_parallel, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["errors"] == {} and report["git_commit"] and report["machine"]
    assert [r["tensor_parallel_size"] for r in report["results"]] == [1, 4]
    assert report["greedy_tokens_agree"] is True  # TP 4 pads the vocabulary (10242 = 4 * 2560 + 2)
    expected = nano_vllm_workload().scaled(SCALE).num_output_tokens
    for r in report["results"]:
        assert len(r["batch1"]["tokens"]) == 4 and r["batch1"]["tpot_median_ms"] > 0
        assert r["throughput"]["num_output_tokens"] == expected


@pytest.mark.timeout(120)
def test_pipeline_layout_matches_one_rank(tmp_path: Path) -> None:
    out = tmp_path / "pp.json"
    args = ["--shape", "tiny", "--layout", "1x1,1x2", "--new-tokens", "4", "--throughput-scale", str(SCALE)]
    result = CliRunner().invoke(tensor_parallel, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["errors"] == {}
    assert [(r["tensor_parallel_size"], r["pipeline_parallel_size"]) for r in report["results"]] == [
        (1, 1),
        (1, 2),
    ]
    assert report["greedy_tokens_agree"] is True
    expected = nano_vllm_workload().scaled(SCALE).num_output_tokens
    assert report["results"][1]["throughput"]["num_output_tokens"] == expected


def test_layout_that_is_not_tp_x_pp_is_refused() -> None:
    result = CliRunner().invoke(tensor_parallel, ["--layout", "2,2"])
    assert result.exit_code == 2 and "'2' is not TPxPP" in result.output
