"""CpuSampler: samples of the CPU time spent, with the stacks they interrupted."""

from __future__ import annotations

import time
from pathlib import Path

from bench.gateway.cpu_sampler import CpuSampler, load_samples


def _burn(sampler: CpuSampler) -> None:
    deadline = time.monotonic() + 30  # a bound, not a timing: it stops at 20 samples
    while sampler.num_samples < 20 and time.monotonic() < deadline:
        sum(i * i for i in range(1000))


def test_samples_name_the_code_that_spent_the_cpu(tmp_path: Path) -> None:
    sampler = CpuSampler(interval_s=0.001)
    sampler.start()
    try:
        _burn(sampler)
    finally:
        sampler.stop(tmp_path / "samples")
    num_samples, own, inclusive = load_samples(tmp_path / "samples")
    assert num_samples >= 20
    burn = next(key for key in inclusive if key[2] == "_burn")
    assert burn[0] == __file__
    assert inclusive[burn] >= 20  # on the stack of every sample it waited for
    assert sum(own.values()) == num_samples  # one innermost frame each
