from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from bench.engine import multimodel as engine_multimodel
from bench.engine.multimodel import WORKLOADS, kv_plan, make_requests, run


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_arrivals_shift_from_model_to_model_and_size_the_pool() -> None:
    wl = WORKLOADS["qwen3-0.6b"]
    requests = make_requests(wl, ["a", "b", "c"], vocab_size=151936)
    assert len(requests) == 3 * (wl.burst + 2 * wl.background)
    bursts = {m: {r.arrival for r in requests if r.burst and r.model == m} for m in "abc"}
    assert bursts == {"a": {0}, "b": {wl.phase_steps}, "c": {2 * wl.phase_steps}}
    assert all(wl.prompt_len[0] <= len(r.prompt) <= wl.prompt_len[1] for r in requests)
    assert all(wl.max_tokens[0] <= r.max_tokens <= wl.max_tokens[1] for r in requests)
    # Lengths do not depend on the vocabulary (the CPU smoke test runs the GPU schedule).
    tiny = make_requests(wl, ["a", "b", "c"], vocab_size=10240)
    assert [(len(r.prompt), r.max_tokens) for r in tiny] == [(len(r.prompt), r.max_tokens) for r in requests]
    plan = kv_plan(wl, requests, kv_bytes_per_token=28 * 2 * 8 * 128 * 2)
    assert plan["block_bytes"] == 16 * 114688
    # The static share cannot hold a burst; the shared pool can, with room to spare.
    assert plan["static_share_over_burst_peak"] < 0.6 < 1.4 < plan["shared_pool_over_burst_peak"]
    assert 6 < plan["burst_peak_gib"] < 10


def test_the_gpu_path_runs_on_cpu_with_tiny_qwen3s(tmp_path: Path) -> None:
    wl = dataclasses.replace(WORKLOADS["tiny"], burst=8, phase_steps=24)
    result = run("cpu", "tiny", workload=wl, workdir=tmp_path, log=lambda _: None)
    shared, static = result["shared_pool"], result["static_split"]
    expected = result["workload"]["num_output_tokens"]
    assert shared["output_tokens"] == static["output_tokens"] == expected
    assert result["workload"]["models"] == ["a", "b", "c"]
    assert result["engine"]["static_split"]["engines"] == 3
    assert (
        result["engine"]["shared_pool"]["pool_blocks_per_engine"]
        >= 3 * result["engine"]["static_split"]["pool_blocks_per_engine"]
    )
    # The bursting model overflows its static share but not the shared pool.
    assert shared["preemptions"] == 0 < static["preemptions"]
    for system in (shared, static):
        assert set(system["per_model"]) == {"a", "b", "c"}
        for m in system["per_model"].values():
            assert m["latency_steps"]["p99"] >= m["latency_steps"]["mean"] > 0
            assert m["latency_s"]["p99"] > 0
    ratios = result["shared_over_static"]
    assert ratios["seconds"] == pytest.approx(shared["seconds"] / static["seconds"], rel=0.01)
    assert set(ratios["a"]) >= {"latency_steps_mean", "latency_steps_p99", "latency_s_mean", "latency_s_p99"}
    json.dumps(result)  # JSON-able as returned
    # Checkpoints stay in the workdir and are reused.
    assert len(list(tmp_path.glob("multimodel-tiny-float32-seed*/config.json"))) == 3


def test_cli_runs_the_demo_models_and_writes_provenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", ["bench/engine/multimodel.py", "--out", str(out)])
    engine_multimodel.main()
    report = json.loads(out.read_text())
    assert report["workload"]["shape"] == "demo"
    assert report["shared_pool"]["output_tokens"] == report["static_split"]["output_tokens"] == 2 * 8 * 64
    for key in ("command", "git_commit", "machine", "date"):
        assert report[key]
