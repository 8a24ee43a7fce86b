from __future__ import annotations

import random

import numpy as np
import pytest

from bench.serving.metrics import SLO, RequestTiming, compute_metrics, percentile
from bench.serving.serve import arrival_gaps


def test_percentile_matches_numpy() -> None:
    values = sorted(random.Random(1).uniform(0, 10) for _ in range(37))
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    with pytest.raises(ValueError):
        percentile([], 50)


def test_metrics_match_a_hand_computed_example() -> None:
    timings = [
        RequestTiming(
            success=True, ttft_s=0.1, e2e_s=0.5, itl_s=(0.2, 0.2), num_output_tokens=3, num_prompt_tokens=10
        ),
        RequestTiming(
            success=True, ttft_s=0.3, e2e_s=0.3, itl_s=(), num_output_tokens=1, num_prompt_tokens=5
        ),
        RequestTiming(success=False, error="HTTP 500: boom"),
    ]
    metrics = compute_metrics(timings, duration_s=2.0, slo=SLO(ttft_ms=200))
    assert (metrics.num_completed, metrics.num_failed) == (2, 1)
    assert metrics.request_throughput == 1.0
    assert metrics.output_throughput == 2.0
    assert metrics.total_token_throughput == 9.5
    # TPOT only for the request with more than one token: (0.5 - 0.1) / 2.
    assert metrics.tpot.mean_ms == pytest.approx(200.0)
    assert metrics.ttft.mean_ms == pytest.approx(200.0)
    assert metrics.ttft.median_ms == pytest.approx(200.0)
    assert metrics.ttft.p99_ms == pytest.approx(100 + 200 * 0.99)
    assert metrics.itl.median_ms == pytest.approx(200.0)
    assert metrics.e2e.mean_ms == pytest.approx(400.0)
    # Only the first request meets TTFT <= 200 ms.
    assert metrics.goodput == 0.5
    assert metrics.errors == ["HTTP 500: boom"]


def test_goodput_is_absent_without_slos() -> None:
    timing = RequestTiming(success=True, ttft_s=0.1, e2e_s=0.2, num_output_tokens=2)
    assert compute_metrics([timing], duration_s=1.0).goodput is None
    assert compute_metrics([timing], duration_s=1.0, slo=SLO(tpot_ms=50)).goodput == 0.0
    assert compute_metrics([timing], duration_s=1.0, slo=SLO(tpot_ms=100, e2e_ms=200)).goodput == 1.0


def test_poisson_gaps_are_the_seeded_exponential_stream() -> None:
    rng = random.Random(7)
    expected = [0.0] + [rng.expovariate(4.0) for _ in range(9)]
    assert arrival_gaps(10, 4.0, seed=7) == expected
    assert arrival_gaps(3, float("inf"), seed=7) == [0.0, 0.0, 0.0]
    gaps = arrival_gaps(4000, 4.0, seed=0)
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.05)
    with pytest.raises(ValueError):
        arrival_gaps(3, 0.0, seed=0)


def test_duration_must_be_positive() -> None:
    with pytest.raises(ValueError):
        compute_metrics([], duration_s=0.0)
