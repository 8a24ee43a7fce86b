"""The per-process profile of a multi-worker gateway: every process sampled, CPU per request each."""

from __future__ import annotations

from pathlib import Path

from bench.gateway.workers_profile import profile_workers


def test_two_workers_are_profiled_with_their_supervisor(tmp_path: Path) -> None:
    result = profile_workers(2, stream=False, max_tokens=4, concurrency=4, seconds=2.0, data_dir=tmp_path)
    assert result["num_requests"] > 0 and not result["errors"]
    assert set(result["processes"]) == {"supervisor", "worker 0", "worker 1"}
    for process in result["processes"].values():
        assert process["num_samples"] > 0
        assert process["cpu_ms_per_request"] > 0
        assert sum(process["threads_ms_per_request"].values()) > 0
    total = sum(p["cpu_ms_per_request"] for p in result["processes"].values())
    assert abs(total - result["cpu_ms_per_request"]) < 1e-6
