# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Sample one token per row in a single pass over the logits: argmax(logits / T + Gumbel noise).

The sampler's exponential race, ``argmax(softmax(logits / T) / q)`` with ``q ~ Exp(1)``, is the
Gumbel-max trick in disguise: ``-log q`` is Gumbel(0, 1) and the softmax's normaliser is the same
for every token of a row, so ``argmax(logits / T - log q)`` draws from the same distribution.
Written that way it needs no softmax and no noise tensor: each logit is read once, its noise made
in registers (Philox, keyed by ``seed``, counter = row * vocab + column), and the row's running
maximum kept on chip. A row with T <= 0 takes the plain argmax (greedy), lowest index on ties::

    pass 1, grid (rows, chunks): best (score, index) of each CHUNK-column slice of each row
    pass 2, grid (rows,):        best over the row's chunks -> int64 token id
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["gumbel_argmax"]

_CHUNK = 8192
_BLOCK = 1024
_NO_INDEX = 2**31 - 1


@triton.jit
def _chunk_kernel(
    logits_ptr, temp_ptr, val_ptr, idx_ptr, seed, vocab, stride_row, num_chunks,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, NO_INDEX: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    temperature = tl.load(temp_ptr + row)
    greedy = temperature <= 0.0
    inv_t = 1.0 / tl.where(greedy, 1.0, temperature)
    best_val = tl.full([BLOCK], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK], NO_INDEX, tl.int32)
    lanes = tl.arange(0, BLOCK)
    for start in range(chunk * CHUNK, tl.minimum((chunk + 1) * CHUNK, vocab), BLOCK):
        cols = start + lanes
        ok = cols < vocab
        x = tl.load(logits_ptr + row * stride_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
        if not greedy:
            u = tl.rand(seed, row * vocab + cols)
            # -log(-log u) is Gumbel(0, 1); u == 0 gives -inf, which never wins over a finite score.
            x = x * inv_t - tl.log(-tl.log(u))
        better = x > best_val  # strict: within a lane, the earlier column keeps a tie
        best_val = tl.where(better, x, best_val)
        best_idx = tl.where(better, cols, best_idx)
    top = tl.max(best_val, 0)
    index = tl.min(tl.where(best_val == top, best_idx, NO_INDEX), 0)
    tl.store(val_ptr + row * num_chunks + chunk, top)
    tl.store(idx_ptr + row * num_chunks + chunk, index)


@triton.jit
def _row_kernel(val_ptr, idx_ptr, out_ptr, num_chunks, CHUNKS: tl.constexpr, NO_INDEX: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, CHUNKS)
    ok = c < num_chunks
    val = tl.load(val_ptr + row * num_chunks + c, mask=ok, other=float("-inf"))
    idx = tl.load(idx_ptr + row * num_chunks + c, mask=ok, other=NO_INDEX)
    top = tl.max(val, 0)
    index = tl.min(tl.where(val == top, idx, NO_INDEX), 0)
    # A row with no finite score (all logits -inf) gets token 0, as torch.argmax does.
    tl.store(out_ptr + row, tl.where(index == NO_INDEX, 0, index).to(tl.int64))


def gumbel_argmax(logits: torch.Tensor, temperature: torch.Tensor, seed: int) -> torch.Tensor:
    """token ids [rows] int64: a draw from softmax(logits / T) per row, argmax where T <= 0.

    logits: [rows, vocab] (any float dtype, unit stride along vocab); temperature: [rows] float32
    on the same device; seed: keys the noise (the same seed and logits give the same tokens).
    """
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        raise ValueError("gumbel_argmax needs contiguous rows")
    if temperature.shape != (rows,):
        raise ValueError(f"temperature {tuple(temperature.shape)} does not match {rows} rows")
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    if rows == 0:
        return out
    num_chunks = triton.cdiv(vocab, _CHUNK)
    vals = torch.empty(rows, num_chunks, dtype=torch.float32, device=logits.device)
    idxs = torch.empty(rows, num_chunks, dtype=torch.int32, device=logits.device)
    _chunk_kernel[(rows, num_chunks)](
        logits, temperature.to(torch.float32), vals, idxs, seed & 0x7FFFFFFF, vocab, logits.stride(0),
        num_chunks, CHUNK=_CHUNK, BLOCK=min(_BLOCK, triton.next_power_of_2(vocab)), NO_INDEX=_NO_INDEX,
    )  # fmt: skip
    _row_kernel[(rows,)](
        vals, idxs, out, num_chunks, CHUNKS=triton.next_power_of_2(num_chunks), NO_INDEX=_NO_INDEX
    )
    return out
