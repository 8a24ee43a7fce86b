# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Greedy argmax as one integer maximum, so any kernel can reduce its share and a later one the rest.

Each candidate becomes an int64 key whose order is ``torch.argmax``'s choice::

    bit 62       NaN (torch.argmax takes the first NaN over any number)
    bits 30-61   the float32 value, its bits reordered so larger floats give larger integers
                 (-0.0 counted as +0.0: they tie, as in torch)
    bits 0-29    MAX_INDEX - index: between equal values the lower index wins

so ``max`` over keys, in any grouping, picks the lowest index of the largest value. A kernel that
computes logits can reduce its own block to one key as it stores them (``normed_gemv``); the
decode step's last kernel reduces the blocks' keys to the token (``engine.kernels.step_advance``).
``argmax_keys`` makes the keys of logits already in memory, for heads that cannot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["MAX_INDEX", "argmax_key", "argmax_keys", "block_key", "key_index", "keys_to_tokens"]

MAX_INDEX = (1 << 30) - 1
"""Largest index a key holds (vocabularies are far smaller)."""
_BLOCK = 1024
"""Logits per program of ``argmax_keys``: 149 programs for a 152k vocabulary, one wave."""


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


@triton.jit
def _keys_kernel(logits_ptr, keys_ptr, vocab, stride_row, num_blocks, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    ok = cols < vocab
    x = tl.load(logits_ptr + row * stride_row + cols, mask=ok, other=0.0)
    tl.store(keys_ptr + row * num_blocks + block, block_key(x, cols, ok))


def argmax_keys(logits: torch.Tensor) -> torch.Tensor:
    """[rows, blocks] int64: each block of 1,024 logits of a row reduced to its best key."""
    rows, vocab = logits.shape
    if vocab - 1 > MAX_INDEX:
        raise ValueError(f"a vocabulary of {vocab} does not fit an argmax key")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    num_blocks = triton.cdiv(vocab, _BLOCK)
    keys = torch.empty(rows, num_blocks, dtype=torch.int64, device=logits.device)
    if rows:
        _keys_kernel[(rows, num_blocks)](logits, keys, vocab, logits.stride(0), num_blocks, BLOCK=_BLOCK)
    return keys


def keys_to_tokens(keys: torch.Tensor) -> torch.Tensor:
    """[rows] int64 token ids from [rows, parts] keys, in torch (tests, and no kernel needed)."""
    return MAX_INDEX - (keys.max(dim=1).values & MAX_INDEX)
