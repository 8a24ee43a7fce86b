"""Serving metrics as vLLM's ``bench serve`` computes them, from per-request timings.

    TTFT  time from sending the request to the first non-empty text chunk
    ITL   gaps between consecutive text chunks, pooled over all requests
    TPOT  per request (E2E - TTFT) / (output_tokens - 1), requests with > 1 output token
    E2E   time from sending the request to the last chunk

Throughputs divide by the benchmark's wall duration. Goodput counts the requests that meet every
SLO given (TTFT, TPOT, E2E; milliseconds) per second. Percentiles interpolate linearly, as numpy's
default does.

Against a peer, every ratio reads "times better than the peer": ours/peer for throughputs,
peer/ours for latencies; None where a side measured nothing (zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 90, 99)
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATISTICS = ("mean_ms", "median_ms", "p90_ms", "p99_ms")


@dataclass(frozen=True, slots=True)
class RequestTiming:
    success: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: tuple[float, ...] = ()
    num_output_tokens: int = 0
    num_prompt_tokens: int = 0
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        if self.num_output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.num_output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Summary:
    mean_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float

    @classmethod
    def of(cls, values_s: Sequence[float]) -> Summary:
        if not values_s:
            return cls(mean_ms=0.0, median_ms=0.0, p90_ms=0.0, p99_ms=0.0)
        ms = sorted(v * 1000 for v in values_s)
        return cls(
            mean_ms=sum(ms) / len(ms),
            median_ms=percentile(ms, 50),
            p90_ms=percentile(ms, 90),
            p99_ms=percentile(ms, 99),
        )


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def is_met(self, timing: RequestTiming) -> bool:
        tpot = timing.tpot_s
        return (
            (self.ttft_ms is None or timing.ttft_s * 1000 <= self.ttft_ms)
            and (self.tpot_ms is None or tpot is None or tpot * 1000 <= self.tpot_ms)
            and (self.e2e_ms is None or timing.e2e_s * 1000 <= self.e2e_ms)
        )


@dataclass(frozen=True, slots=True)
class ServeMetrics:
    duration_s: float
    num_completed: int
    num_failed: int
    num_prompt_tokens: int
    num_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    goodput: float | None
    ttft: Summary
    tpot: Summary
    itl: Summary
    e2e: Summary
    errors: list[str] = field(default_factory=list)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile(values, q) with linear interpolation, on an already sorted sequence."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def compute_metrics(
    timings: Sequence[RequestTiming], duration_s: float, slo: SLO | None = None
) -> ServeMetrics:
    if duration_s <= 0:
        raise ValueError("duration must be positive")
    done = [t for t in timings if t.success]
    num_output = sum(t.num_output_tokens for t in done)
    num_prompt = sum(t.num_prompt_tokens for t in done)
    tpots = [tpot for t in done if (tpot := t.tpot_s) is not None]
    goodput = None if slo is None else sum(slo.is_met(t) for t in done) / duration_s
    return ServeMetrics(
        duration_s=duration_s,
        num_completed=len(done),
        num_failed=len(timings) - len(done),
        num_prompt_tokens=num_prompt,
        num_output_tokens=num_output,
        request_throughput=len(done) / duration_s,
        output_throughput=num_output / duration_s,
        total_token_throughput=(num_output + num_prompt) / duration_s,
        goodput=goodput,
        ttft=Summary.of([t.ttft_s for t in done]),
        tpot=Summary.of(tpots),
        itl=Summary.of([gap for t in done for gap in t.itl_s]),
        e2e=Summary.of([t.e2e_s for t in done]),
        errors=[t.error for t in timings if not t.success],
    )


def compare(ours: ServeMetrics, peer: ServeMetrics) -> dict[str, float | None]:
    """Ratios > 1 where ours is better: ``output_throughput`` ours/peer, ``ttft_p99_ms`` peer/ours."""
    ratios: dict[str, float | None] = {}
    for name in THROUGHPUTS:
        ratios[name] = _ratio(getattr(ours, name), getattr(peer, name))
    for name in LATENCIES:
        for stat in STATISTICS:
            ratios[f"{name}_{stat}"] = _ratio(
                getattr(getattr(peer, name), stat), getattr(getattr(ours, name), stat)
            )
    return ratios


def _ratio(numerator: float, denominator: float) -> float | None:
    if numerator <= 0 or denominator <= 0:
        return None
    return numerator / denominator
