# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Greedy argmax as one integer maximum, so blocks of a row reduce separately and in any order.

Each candidate becomes an int64 key whose order is ``torch.argmax``'s choice::

    bit 62       NaN (torch.argmax takes the first NaN over any number)
    bits 30-61   the float32 value, its bits reordered so larger floats give larger integers
                 (-0.0 counted as +0.0: they tie, as in torch)
    bits 0-29    MAX_INDEX - index: between equal values the lower index wins

so ``max`` over keys, in any grouping, picks the lowest index of the largest value
(``engine.kernels.step_advance`` reduces a row's blocks this way).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["MAX_INDEX", "argmax_key", "block_key", "key_index"]

MAX_INDEX = (1 << 30) - 1
"""Largest index a key holds (vocabularies are far smaller)."""


@triton.jit
def argmax_key(x, index):
    """int64 keys of float values ``x`` at ``index`` (same shape): larger key = torch's argmax."""
    x = tl.where(x == 0.0, 0.0, x.to(tl.float32))  # -0.0 ties with +0.0
    bits = x.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    ordered = tl.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits + 0x80000000)
    nan = x != x
    ordered = tl.where(nan, 0, ordered)
    return (nan.to(tl.int64) << 62) | (ordered << 30) | (0x3FFFFFFF - index.to(tl.int64))


@triton.jit
def block_key(x, index, mask):
    """One key for the best of a block of values (1-D ``x``, ``index``; ``mask`` the valid ones).

    Reduced as floats first, so the integer key is built once per block, not per value."""
    x = tl.where(mask, x.to(tl.float32), float("-inf"))
    nan = mask & (x != x)
    top = tl.max(tl.where(nan, float("-inf"), x), 0)
    any_nan = tl.max(nan.to(tl.int32), 0) > 0
    chosen = tl.where(any_nan, nan, mask & (x == top))
    first = tl.min(tl.where(chosen, index, 0x3FFFFFFF), 0)
    return argmax_key(tl.where(any_nan, float("nan"), top), first)


@triton.jit
def key_index(key):
    """The index a key (or the maximum of several) stands for."""
    return 0x3FFFFFFF - (key & 0x3FFFFFFF)
