"""bench.serving.stage_delta: a timed run's share of the gateway's cumulative histograms."""

from __future__ import annotations

from bench.serving.stage_delta import histogram_means


def _scrape(stage_sums: dict[str, tuple[float, int]], ttft: tuple[float, int]) -> str:
    lines = [
        "# HELP strongroom:gateway_stage_seconds Gateway stage latency",
        "# TYPE strongroom:gateway_stage_seconds histogram",
    ]
    for stage, (total, count) in stage_sums.items():
        for worker in ("0", "1"):  # two workers' series, summed
            labels = f'stage="{stage}",model_name="m",worker="{worker}"'
            lines += [
                f'strongroom:gateway_stage_seconds_bucket{{{labels},le="+Inf"}} {count}',
                f"strongroom:gateway_stage_seconds_count{{{labels}}} {count}",
                f"strongroom:gateway_stage_seconds_sum{{{labels}}} {total}",
            ]
    lines += [
        "# HELP vllm:time_to_first_token_seconds TTFT",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} {ttft[1]}',
        f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {ttft[1]}',
        f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {ttft[0]}',
        "# HELP other_seconds not ours",
        "# TYPE other_seconds histogram",
        'other_seconds_bucket{le="+Inf"} 5',
        "other_seconds_count 5",
        "other_seconds_sum 9",
    ]
    return "\n".join(lines) + "\n"


def test_only_the_run_between_the_scrapes_counts() -> None:
    before = _scrape({"auth": (0.5, 100), "engine_first_token": (2.0, 100)}, (3.0, 100))
    # The run: per worker 50 more auths taking 0.05 s in all, 50 first tokens taking 4.0 s.
    after = _scrape({"auth": (0.55, 150), "engine_first_token": (6.0, 150), "quota": (0.01, 10)}, (9.0, 200))
    rows = histogram_means(before, after)
    assert rows["stage auth"]["count"] == 100
    assert abs(rows["stage auth"]["mean_ms"] - 1.0) < 1e-9  # 2 x 0.05 s over 100
    assert abs(rows["stage engine_first_token"]["mean_ms"] - 80.0) < 1e-9
    assert rows["stage quota"] == {"count": 20, "mean_ms": 1.0}
    assert abs(rows["vllm:time_to_first_token_seconds"]["mean_ms"] - 60.0) < 1e-9
    assert not any("other" in row for row in rows)


def test_a_stage_nothing_reached_during_the_run_is_left_out() -> None:
    scrape = _scrape({"auth": (0.5, 100)}, (1.0, 10))
    assert histogram_means(scrape, scrape) == {}
