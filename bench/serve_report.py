"""What ``bench serve`` prints: one server's metrics, or ours and the peer's side by side."""

from __future__ import annotations

from bench.serve_metrics import LATENCIES, STATISTICS, THROUGHPUTS, ServeMetrics

__all__ = ["format_comparison", "format_metrics", "redacted"]

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
