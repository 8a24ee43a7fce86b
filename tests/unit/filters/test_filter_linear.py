"""Every detector is linear in its input (issue 18, item 1: one prompt froze the gateway).

The payment-card check walked back over every earlier 4-digit group: "1234 5678 " repeated to
80 KB took 26.4 s, 40 KB 4 s, 1 MB minutes. Scanning 1 MB of adversarial digit groups must now
cost about 25 times scanning 40 KB. The bound is 50 (twice linear, for a loaded 2-core machine
and caches; quadratic would be 625), on the best of several runs of CPU time, with every
detector of the packaged policy and normalization. Worst inputs of every detector, timed one by
one: ``bench/filters/worst_case.py``.
"""

from __future__ import annotations

import time

import pytest

from bench.filters.worst_case import LARGE, SMALL, build
from filters import FilterConfig, FilterPipeline
from filters.normalized import normalize

LINEAR = LARGE / SMALL  # 25
BOUND = 2 * LINEAR


@pytest.fixture(scope="module")
def scan_all(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    detectors = FilterPipeline.from_config(
        FilterConfig(), tmp_path_factory.mktemp("d")
    ).ruleset.scanner.detectors

    def scan(text: str) -> None:
        norm = normalize(text).text
        for detector in detectors:
            detector.scan(norm)

    return scan


def cpu_time(fn, text: str, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn(text)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit",
    [
        "1234 5678 ",  # the penetration test's input
        "4111.1111-",  # mixed separators: every typed window is tried
        "1 ",  # one run of one-digit groups
    ],
)
def test_one_megabyte_of_digit_groups_costs_about_25_times_40_kb(scan_all, unit: str) -> None:  # type: ignore[no-untyped-def]
    small = cpu_time(scan_all, build(unit, SMALL), 5)
    large = cpu_time(scan_all, build(unit, LARGE), 2)
    assert large <= BOUND * small, f"{unit!r}: 40 KB {small:.3f} s, 1 MB {large:.3f} s ({large / small:.0f}x)"
