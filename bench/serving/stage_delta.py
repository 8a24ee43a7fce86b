"""Where a timed run's latency went, from two /metrics scrapes taken before and after it.

The gateway's histograms count from its start, warm-up included; the difference of two scrapes
is the run alone. Printed per gateway stage (``strongroom:gateway_stage_seconds``: auth, policy,
filters, quota, audit, the engine's first token and whole answer) and per vLLM-named engine
histogram: observations and mean milliseconds, summed over workers, models and engines.

    python -m bench.serving.stage_delta before.txt after.txt [--output delta.json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["histogram_means", "stage_delta"]

_STAGES = "strongroom:gateway_stage_seconds"
_ENGINE = (
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)


def _sums(text: str) -> dict[str, list[float]]:
    """row name -> [sum of seconds, observations], summed over every label but ``stage``."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for family in text_string_to_metric_families(text):
        if family.type != "histogram" or (family.name != _STAGES and family.name not in _ENGINE):
            continue
        for sample in family.samples:
            row = f"stage {sample.labels.get('stage', '?')}" if family.name == _STAGES else family.name
            if sample.name.endswith("_sum"):
                out[row][0] += sample.value
            elif sample.name.endswith("_count"):
                out[row][1] += sample.value
    return out


def histogram_means(before: str, after: str) -> dict[str, dict[str, float]]:
    """row -> {"count", "mean_ms"} of what was observed between the two scrapes."""
    start, end = _sums(before), _sums(after)
    rows: dict[str, dict[str, float]] = {}
    for row, (total, count) in end.items():
        total -= start.get(row, [0.0, 0.0])[0]
        count -= start.get(row, [0.0, 0.0])[1]
        if count > 0:
            rows[row] = {"count": count, "mean_ms": 1000.0 * total / count}
    return rows


def stage_delta(before: Path, after: Path) -> dict[str, dict[str, float]]:
    return histogram_means(before.read_text(), after.read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--output", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = stage_delta(args.before, args.after)
    for row, figures in sorted(rows.items()):
        print(f"  {row:42s} {int(figures['count']):8d} obs  mean {figures['mean_ms']:9.2f} ms")
    if args.output:
        args.output.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
