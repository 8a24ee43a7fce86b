"""What ``bench serve`` prints: one server's metrics, or ours and the peer's side by side.

    python -m bench.serving.report [--tpot-p99-ms 50] RESULT.json ...

prints a rate sweep (several ``bench serve --output`` files) as one table, one row per rate, and
the highest rate whose TPOT p99 stays under the bound with no failed request.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.serving.metrics import LATENCIES, STATISTICS, THROUGHPUTS, ServeMetrics

__all__ = ["format_comparison", "format_metrics", "format_sweep", "redacted"]

_UNITS = {"request_throughput": "req/s", "output_throughput": "out tok/s", "total_token_throughput": "tok/s"}


def format_metrics(metrics: ServeMetrics) -> str:
    lines = [
        f"completed {metrics.num_completed}, failed {metrics.num_failed}, duration {metrics.duration_s:.2f} s",
        f"request throughput {metrics.request_throughput:.2f} req/s, "
        f"output {metrics.output_throughput:.1f} tok/s, total {metrics.total_token_throughput:.1f} tok/s",
    ]
    if metrics.goodput is not None:
        lines.append(f"goodput {metrics.goodput:.2f} req/s")
    for name in LATENCIES:
        s = getattr(metrics, name)
        lines.append(
            f"{name.upper():>5} ms: mean {s.mean_ms:.2f}  median {s.median_ms:.2f}  p90 {s.p90_ms:.2f}  p99 {s.p99_ms:.2f}"
        )
    return "\n".join(lines)


def format_comparison(
    ours_label: str, ours: ServeMetrics, peer_label: str, peer: ServeMetrics, ratios: dict[str, float | None]
) -> str:
    """Both runs in one table; the ratio column reads "times better than the peer"."""

    def ratio(key: str) -> str:
        value = ratios[key]
        return "-" if value is None else f"{value:.2f}x"

    width = max(12, len(ours_label), len(peer_label))
    rows = [
        f"{'':<24} {ours_label:>{width}} {peer_label:>{width}}  ratio (ours/peer; latency peer/ours)",
        f"{'completed / failed':<24} {f'{ours.num_completed} / {ours.num_failed}':>{width}} "
        f"{f'{peer.num_completed} / {peer.num_failed}':>{width}}",
        f"{'duration s':<24} {ours.duration_s:>{width}.2f} {peer.duration_s:>{width}.2f}",
    ]
    for name in THROUGHPUTS:
        label = f"{name.split('_')[0]} {_UNITS[name]}"
        rows.append(
            f"{label:<24} {getattr(ours, name):>{width}.2f} {getattr(peer, name):>{width}.2f}  {ratio(name)}"
        )
    for name in LATENCIES:
        for stat in STATISTICS:
            label = f"{name.upper()} {stat.removesuffix('_ms')} ms"
            a, b = getattr(getattr(ours, name), stat), getattr(getattr(peer, name), stat)
            rows.append(f"{label:<24} {a:>{width}.2f} {b:>{width}.2f}  {ratio(f'{name}_{stat}')}")
    return "\n".join(rows)


def redacted(argv: list[str]) -> list[str]:
    """The command line without the bearer token (``--api-key X`` / ``--api-key=X``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
        elif arg == "--api-key":
            out.append(arg)
            hide_next = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=<redacted>")
        else:
            out.append(arg)
    return out


def _rate(report: dict[str, Any]) -> float:
    rate = report["request_rate"]
    return math.inf if rate == "inf" else float(rate)


def format_sweep(
    reports: Sequence[dict[str, Any]], tpot_p99_ms: float = 50.0, offline_tok_s: float | None = None
) -> str:
    """One row per (rate, system) of ``bench serve`` JSON reports, then the highest rate that holds
    TPOT p99 < ``tpot_p99_ms`` with every request completed and TPOT measured, per system. With
    ``offline_tok_s`` (the engine alone on the same workload) each row's output tok/s is also
    given as a fraction of it; runs of both policies (labels ending ``-filters-default`` and
    ``-filters-off``) at one rate get their ratio."""
    width = max([24, *(len(str(r.get("label", "server"))) for r in reports)])
    header = (
        f"{'system':<{width}} {'rate':>6} {'done/fail':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'TPOT p50':>9} {'TPOT p99':>9} {'out tok/s':>10}" + (f" {'x offline':>9}" if offline_tok_s else "")
    )
    rows = [header + "   (latencies in ms)"]
    by_policy: dict[tuple[str, str], float] = {}
    best: dict[str, float | None] = {}
    one_chunk = False
    for report in sorted(reports, key=_rate):
        rate = _rate(report)
        runs = [(report.get("label", "server"), report["metrics"])]
        if report.get("peer"):
            runs.append((report["peer"]["label"], report["peer"]["metrics"]))
        for label, m in runs:
            done = f"{m['num_completed']}/{m['num_failed']}"
            # TPOT 0 with more than one token per request: every completion came in one chunk.
            unmeasured = m["tpot"]["p99_ms"] == 0 and m["num_output_tokens"] > m["num_completed"]
            one_chunk |= unmeasured
            rows.append(
                f"{label:<{width}} {report['request_rate']!s:>6} {done:>9} "
                f"{m['ttft']['median_ms']:>9.1f} {m['ttft']['p99_ms']:>9.1f} "
                f"{m['tpot']['median_ms']:>9.2f} {m['tpot']['p99_ms']:>9.2f} {m['output_throughput']:>10.1f}"
                + (f" {m['output_throughput'] / offline_tok_s:>9.2f}" if offline_tok_s else "")
                + (" *" if unmeasured else "")
            )
            for policy in ("default", "off"):
                if label.endswith(f"-filters-{policy}"):
                    by_policy[(str(report["request_rate"]), policy)] = m["output_throughput"]
            best.setdefault(label, None)
            holds = (
                m["num_completed"] > 0
                and m["num_failed"] == 0
                and not unmeasured
                and m["tpot"]["p99_ms"] < tpot_p99_ms
            )
            if holds and (best[label] is None or rate > best[label]):
                best[label] = rate
    if one_chunk:
        rows.append("* TPOT not measured: each completion arrived in one chunk (the response filter holds")
        rows.append(
            "  back its longest match and flushes it at the end; shorter outputs than that stream nothing)"
        )
    for label, rate in best.items():
        verdict = "none of the rates" if rate is None else f"{rate:g} req/s"
        rows.append(f"{label}: highest rate with TPOT p99 < {tpot_p99_ms:g} ms and no failures: {verdict}")
    for (rate_str, policy), on in by_policy.items():
        off = by_policy.get((rate_str, "off"))
        if policy == "default" and off:
            rows.append(f"rate {rate_str}: filters on / off output tok/s {on / off:.2f}")
    if offline_tok_s:
        rows.append(f"offline engine, same workload and checkpoint: {offline_tok_s:.1f} output tok/s")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A rate sweep of `bench serve` JSON results as one table.")
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--tpot-p99-ms", type=float, default=50.0)
    parser.add_argument(
        "--offline", type=Path, default=None, help="bench.engine.throughput JSON of the same workload"
    )
    args = parser.parse_args(argv)
    reports = [json.loads(path.read_text()) for path in args.results]
    offline = None
    if args.offline is not None:
        ours = [r for r in json.loads(args.offline.read_text())["results"] if r["system"] == "ours"]
        offline = ours[0]["output_tok_s"] if ours else None
    print(format_sweep(reports, args.tpot_p99_ms, offline))


if __name__ == "__main__":
    main()
