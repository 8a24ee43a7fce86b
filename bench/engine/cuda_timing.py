"""GPU time per call of a launch sequence, from CUDA events around back-to-back repeats."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["event_times_us"]


def event_times_us(fn: Callable[[], object], reps: int, *, rounds: int = 5, warm_up: int = 20) -> list[float]:
    """µs per call of ``fn`` in each of ``rounds`` rounds of ``reps`` calls (after ``warm_up``).

    Only meaningful when the GPU, not the host's launching, is the bound: a kernel shorter than
    its launch overhead is timed at the host's launch rate."""
    import torch

    for _ in range(warm_up):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return times
