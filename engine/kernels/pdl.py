# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Programmatic dependent launch (PDL, Hopper and later): a kernel may start while the one before
it in the stream is still finishing, and waits for it only where it reads or writes shared data.

A decode step of a small model is a chain of hundreds of short kernels, each paying its launch,
its blocks' start and its first memory round trip before doing any work. Launched with PDL, the
next kernel's blocks are placed as soon as every block of the current one has started, and run
whatever needs nothing from it (a GEMM's first weight tile: weights are never written) before
``pdl_wait``. Captured into a CUDA graph, the overlap becomes a programmatic edge of the graph::

    kernel i:      [ start | work ............ | tail ]
    kernel i+1:              [ start | W tile | wait ]-> [ work ... ]

Every kernel launched with PDL calls ``pdl_wait`` before its first read of another kernel's output
and before its first store, so ordering (read-after-write and write-after-read through reused
buffers) is what it was; ``pdl_wait`` also lets the kernel after it launch early. Before
``pdl_wait`` a kernel reads only what no kernel of the step writes before it: weights, and the
step's inputs (positions, slots, block tables, context lengths), which are copied in before the
step's first kernel or written by the previous step's last (``engine.kernels.step_advance``,
which itself writes only after its ``pdl_wait``). That is safe because a kernel starts early only
once the kernel ahead has passed its own ``pdl_wait``, that is once every kernel before that one
has finished. Off on CPU (the
interpreter), before Hopper, and where the caller's ``CudaTuning.pdl`` is off.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["pdl_launch", "pdl_wait"]

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def pdl_wait(PDL: tl.constexpr):
        if PDL:
            gdc_wait()
            gdc_launch_dependents()

    _AVAILABLE = True
except ImportError:  # a Triton without grid dependency control

    @triton.jit
    def pdl_wait(PDL: tl.constexpr):
        pass

    _AVAILABLE = False


@functools.cache
def _supported(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def pdl_launch(t: torch.Tensor, enabled: bool) -> dict[str, Any]:
    """The kernel arguments for a launch on t's device: ``PDL`` and, when on, ``launch_pdl``.
    ``enabled``: the caller's ``CudaTuning.pdl``."""
    on = enabled and _AVAILABLE and t.is_cuda and _supported(t.device.index or 0)
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}
