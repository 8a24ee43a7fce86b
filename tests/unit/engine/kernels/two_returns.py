# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""A kernel the interpreter runs and Triton's compiler refuses, in the shape of a bug that shipped.

``engine.kernels.e4m3.cache_value`` once returned E4M3 from its FP8 branch and x from the other;
the compiler types every return of a function alike, whichever branch a constexpr takes, so
every FP8 KV-cache write failed on the H200 while the CPU tests passed. ``test_hopper_compile``
compiles this to show that it catches it.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["store_kernel"]


@triton.jit
def _cache_value(x, FP8: tl.constexpr):
    if FP8:
        return x.to(tl.float8e4nv)
    return x


@triton.jit
def store_kernel(x_ptr, out_ptr, FP8: tl.constexpr):
    i = tl.arange(0, 16)
    tl.store(out_ptr + i, _cache_value(tl.load(x_ptr + i), FP8))
