# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Structured output's mask, applied from the packed bitmask: disallowed logits -> -inf, in place.

The grammar library packs each constrained row's allowed tokens 32 to an int32 word. Unpacking
that to a bool tensor first costs 32 × the bitmask in memory and several passes; this kernel
reads the words and writes only the logits they forbid, so a free row is never touched and an
allowed logit is never read or written::

    bitmask: [num_masks, ceil(vocab / 32)] int32, bit (t % 32) of word (t // 32) set = t allowed
    rows:    [num_masks] int32, the logits row each mask applies to (-1: skip this mask)
    grid (num_masks, cdiv(vocab, BLOCK)): each program one BLOCK of tokens of one mask
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["apply_token_bitmask"]

_BLOCK = 4096


@triton.jit
def _token_bitmask_kernel(
    logits_ptr, bitmask_ptr, rows_ptr, vocab, stride_logits, stride_mask, BLOCK: tl.constexpr
):
    mask_row = tl.program_id(0)
    row = tl.load(rows_ptr + mask_row)
    if row >= 0:
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < vocab
        words = tl.load(bitmask_ptr + mask_row.to(tl.int64) * stride_mask + cols // 32, mask=ok, other=-1)
        allowed = ((words >> (cols % 32)) & 1) != 0
        tl.store(
            logits_ptr + row.to(tl.int64) * stride_logits + cols,
            tl.full((BLOCK,), float("-inf"), logits_ptr.dtype.element_ty),
            mask=ok & ~allowed,
        )


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor) -> None:
    """Set ``logits[rows[k], t]`` to -inf for every token t that ``bitmask[k]`` forbids (module doc).

    logits: [num_seqs, vocab] float, bitmask: [num_masks, >= ceil(vocab / 32)] int32,
    rows: [num_masks] int32; all on one device."""
    num_masks = bitmask.shape[0]
    vocab = logits.shape[1]
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError("logits must be [num_seqs, vocab], contiguous along the vocabulary")
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.stride(1) != 1:
        raise ValueError(f"bitmask must be a 2-d contiguous int32 tensor, got {bitmask.dtype}")
    if bitmask.shape[1] * 32 < vocab:
        raise ValueError(f"bitmask of {bitmask.shape[1]} words cannot cover {vocab} tokens")
    if rows.shape != (num_masks,) or rows.dtype != torch.int32:
        raise ValueError(f"rows must be [{num_masks}] int32, got {tuple(rows.shape)} {rows.dtype}")
    if num_masks == 0:
        return
    grid = (num_masks, triton.cdiv(vocab, _BLOCK))
    _token_bitmask_kernel[grid](
        logits, bitmask, rows, vocab, logits.stride(0), bitmask.stride(0), BLOCK=_BLOCK, num_warps=4
    )
