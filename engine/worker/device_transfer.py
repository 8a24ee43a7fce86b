"""Host lists to device tensors without stalling the host behind the GPU.

``torch.tensor(values, device="cuda")`` copies from pageable memory, and CUDA makes such a copy
wait for everything already queued on the stream: with the next step in flight that would stall
the host until the GPU drains. A copy from pinned memory is queued like a kernel instead.

Copies back to the host (a step's sampled tokens) go on a stream of their own, so the next step's
kernels do not queue behind them: on the step's stream each small copy is a few microseconds
during which no kernel runs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

__all__ = ["copy_stream", "scatter_rows", "to_device", "to_host"]


def to_device(
    values: Sequence[int] | Sequence[float] | Sequence[bool] | Sequence[Sequence[int]],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """A new tensor on ``device`` holding ``values``; queued, not waited for, on CUDA."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    # The caching host allocator keeps the pinned buffer alive until the copy has run.
    return host.pin_memory().to(device, non_blocking=True)


def scatter_rows(dst: torch.Tensor, dst_rows: list[int], src: torch.Tensor, src_rows: list[int]) -> None:
    """``dst[dst_rows[j]] = src[src_rows[j]]`` on the device, queued behind what wrote ``src``."""
    if not dst_rows:
        return
    first, n = dst_rows[0], len(dst_rows)
    if dst_rows == src_rows and dst_rows[-1] == first + n - 1 and dst_rows == list(range(first, first + n)):
        # The same rows, one run (decode with the batch unchanged, every step at one sequence):
        # one device copy instead of two index uploads and a gather-scatter.
        dst[first : first + n] = src[first : first + n]
        return
    dst[to_device(dst_rows, torch.long, dst.device)] = src[to_device(src_rows, torch.long, src.device)]


def copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream that copies results back to the host on ``device`` (one per device)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _copy_stream(index)


@functools.cache
def _copy_stream(index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(torch.device("cuda", index))  # type: ignore[no-untyped-call]


def to_host(t: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """(host tensor, event): a copy of ``t`` as of now on its stream; it is complete once the
    event has completed (None: already complete, ``t`` was on the CPU)."""
    if not t.is_cuda:
        return t, None
    stream = copy_stream(t.device)
    stream.wait_stream(torch.cuda.current_stream(t.device))
    with torch.cuda.stream(stream):
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
        ready.record(stream)
    t.record_stream(stream)  # the allocator must not hand t's memory out before the copy has run
    return host, ready
