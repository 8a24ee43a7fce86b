"""Worst inputs we can construct for each detector, scanned at 40 KB and at 1 MB (one core).

    .venv/bin/python -m bench.filters.worst_case [--repeat 3] [--small 40000 --large 1000000]

Every detector must be linear in its input: the 1 MB scan may cost about 25 times the 40 KB
scan, never 625 times (quadratic). Each input repeats one short unit aimed at a detector's
weak spot: the card check's walk back over earlier 4-digit groups (26.4 s for 80 KB before it
was bounded), a digit run of one-digit groups (the most windows), unbounded look-aheads (an IBAN
head followed by endless groups, a private-key header with no end line), backtracking (an
international phone number's digit groups, an e-mail domain of dashes), and many overlapping
spans (a valid card in every window). ``unit`` is written to the text as is; detectors scan the
normalized text, as the pipeline does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import click

from bench.filters.results import RESULTS, pin_one_core, provenance

SMALL, LARGE = 40_000, 1_000_000

WORST_INPUTS: dict[str, tuple[str, ...]] = {
    "payment_card": ("1234 5678 ", "4111 1111 1111 1111 ", "123 456-", "1 ", "4111.1111-", "12 34\n"),
    "cn_resident_id": ("110105 19491231 002x ", "123456-", "1 ", "11010519491231002"),
    "cn_credit_code": ("91350100m000100y43 ", "913501", "9135010"),
    "cn_mobile": ("138 1234 5678 ", "+86 138.", "1381234 ", "1 "),
    "iban": ("de89 ", "de89 3704 ", "gb82west", "de89 370 "),
    "us_ssn": ("078-05-1120 ", "123-45-", "12 ", "078 05 "),
    "email": ("a@", "a.", "a@b.co ", "a [at] b [dot] ", "x@a-", "ab at cd dot ", "a-"),
    "phone": ("+1" + "1" * 30 + " ", "+86 (1", "(415) 555-", "+1 2 3 4 5 6 "),
    "ipv4": ("1.1.1.1.", "255.", "1.2.3.4 "),
    "secret": ("-----begin rsa private key-----", "password=", "api_key = ", "akia", "sk-a"),
    "keyword": ("洗钱", "洗 ", "i.n.s.i.d.e.r ", "insider trading "),
    "prompt_injection": ("ignore previous ", "忽略之前", "i g n o r e "),
    "normalize": ("4\u034f", "e\u0301", "ß", "١٢", "\u0430"),
}


def build(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Best CPU time of ``repeat`` runs: other processes on a shared machine inflate wall time."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def scanners() -> dict[str, Callable[[str], object]]:
    """Each detector of the packaged policy on normalized text, and normalization itself."""
    from pathlib import Path

    from filters import FilterConfig, FilterPipeline
    from filters.normalized import normalize

    pipeline = FilterPipeline.from_config(FilterConfig(), Path("."))
    out: dict[str, Callable[[str], object]] = {"normalize": normalize}
    for detector in pipeline.ruleset.scanner.detectors:
        out[detector.name] = lambda text, d=detector: d.scan(normalize(text).text)
    return out


def measure(
    scan: Callable[[str], object], unit: str, repeat: int, sizes: tuple[int, int]
) -> dict[str, float]:
    small, large = build(unit, sizes[0]), build(unit, sizes[1])
    t_small = best_time(lambda: scan(small), repeat * 3)
    t_large = best_time(lambda: scan(large), repeat)
    return {
        "small_ms": round(t_small * 1e3, 3),
        "large_ms": round(t_large * 1e3, 1),
        "ratio": round(t_large / max(t_small, 1e-6), 1),
        "large_mchars_per_s": round(sizes[1] / max(t_large, 1e-6) / 1e6, 2),
    }


@click.command()
@click.option("--repeat", default=3, show_default=True)
@click.option("--small", default=SMALL, show_default=True)
@click.option("--large", default=LARGE, show_default=True)
@click.option(
    "--out", default="filters_worst_case.json", show_default=True, help="File name under bench/results."
)
def main(repeat: int, small: int, large: int, out: str) -> None:
    pin_one_core()
    result: dict[str, Any] = {**provenance("bench.filters.worst_case"), "small": small, "large": large}
    detectors: dict[str, Any] = {}
    for name, scan in scanners().items():
        rows = {unit: measure(scan, unit, repeat, (small, large)) for unit in WORST_INPUTS[name]}
        worst = max(rows, key=lambda u: rows[u]["large_ms"])
        detectors[name] = {"worst_unit": worst, "worst": rows[worst], "inputs": rows}
        print(f"{name:18} worst {worst!r:40} {rows[worst]}", flush=True)
    result["detectors"] = detectors
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
