# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""The last kernel of a greedy decode graph: the token, and the next step's inputs, on the device.

At one sequence the host's share of a decode step costs the GPU more than any kernel does: the
token's argmax, its copy back, the next step's input copy and the token's scatter into it are
each a separate operation on the stream between two graph replays. With this kernel at the end of
the graph, each row of the static inputs (``engine.worker.cuda_graph_runner``) leaves the replay
ready for the next one::

    grid (rows, blocks): each program turns ``CudaTuning.step_block`` logits into one argmax
                         key (engine.kernels.argmax); the last of a row's programs to finish
                         (a counter per row, reset by that program) reduces the row's keys:
    token      = the row's argmax
    token_ids  = token            the next step's input, in place
    out        = token            a ring slot the host copies from, off the step's stream
    positions += 1, context_lens += 1
    slots      = block_tables[row, position // block_size] * block_size + position % block_size

Padding rows (context length 0) get a token and keep their inputs: no KV write. When the next
step is the same rows one position on and no row needs a block its table does not hold yet, the
host copies nothing; otherwise it stages the inputs as usual, overwriting all of this.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.argmax import MAX_INDEX, block_key, key_index
from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["step_advance"]


@triton.jit
def _step_advance_kernel(
    logits_ptr, keys_ptr, count_ptr, token_ptr, out_ptr, pos_ptr, ctx_ptr, slot_ptr, table_ptr,
    vocab, stride_logits, num_blocks, stride_table, width, block_size,
    BLOCK: tl.constexpr, KEYS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    block = tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    ok = cols < vocab
    # The row's inputs and next slot, read while the LM head still runs: no kernel before this one
    # writes them (engine.kernels.pdl), so only the token's reduction waits for the logits.
    ctx = tl.load(ctx_ptr + row)
    pos = tl.load(pos_ptr + row) + 1
    # Past the table's width the host stages anyway (the sequence is at its length limit).
    slot_block = tl.load(table_ptr + row * stride_table + tl.minimum(pos // block_size, width - 1))
    pdl_wait(PDL)
    x = tl.load(logits_ptr + row.to(tl.int64) * stride_logits + cols, mask=ok, other=0.0)
    tl.store(keys_ptr + row * num_blocks + block, block_key(x, cols, ok))
    # acq_rel: the program that counts last sees every other program's key.
    if tl.atomic_add(count_ptr + row, 1, sem="acq_rel") == num_blocks - 1:
        k = tl.arange(0, KEYS)
        keys = tl.load(keys_ptr + row * num_blocks + k, mask=k < num_blocks, other=-1)
        token = key_index(tl.max(keys, 0))
        tl.store(count_ptr + row, 0)  # ready for the next step
        tl.store(token_ptr + row, token)
        tl.store(out_ptr + row, token)
        if ctx > 0:
            tl.store(pos_ptr + row, pos)
            tl.store(ctx_ptr + row, ctx + 1)
            tl.store(slot_ptr + row, slot_block.to(tl.int64) * block_size + pos % block_size)


def step_advance(
    logits: torch.Tensor,
    counts: torch.Tensor,
    token_ids: torch.Tensor,
    out: torch.Tensor,
    positions: torch.Tensor,
    context_lens: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
    *,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> None:
    """Greedy tokens of ``logits`` [rows, vocab] into ``token_ids`` and ``out`` [rows] int64, and
    ``positions``, ``context_lens``, ``slot_mapping`` [rows] moved one token on (see module doc).

    counts: [rows] int32, zero before the first call; each call leaves it zero again."""
    rows, vocab = logits.shape
    for name, t in (("out", out), ("positions", positions), ("slot_mapping", slot_mapping)):
        if t.shape != (rows,) or t.dtype != torch.int64:
            raise ValueError(f"{name} must be [{rows}] int64, got {tuple(t.shape)} {t.dtype}")
    if counts.shape != (rows,) or counts.dtype != torch.int32:
        raise ValueError(f"counts must be [{rows}] int32, got {tuple(counts.shape)} {counts.dtype}")
    if context_lens.shape != (rows,) or block_tables.shape[0] != rows or token_ids.shape != (rows,):
        raise ValueError("token_ids, context_lens and block_tables must have one row per logits row")
    if vocab - 1 > MAX_INDEX:
        raise ValueError(f"a vocabulary of {vocab} does not fit an argmax key")
    if logits.stride(1) != 1:
        raise ValueError("logits must be contiguous along the vocabulary")
    if rows == 0:
        return
    num_blocks = triton.cdiv(vocab, tuning.step_block)
    keys = torch.empty(rows, num_blocks, dtype=torch.int64, device=logits.device)
    _step_advance_kernel[(rows, num_blocks)](
        logits, keys, counts, token_ids, out, positions, context_lens, slot_mapping, block_tables,
        vocab, logits.stride(0), num_blocks, block_tables.stride(0), block_tables.shape[1], block_size,
        BLOCK=tuning.step_block, KEYS=triton.next_power_of_2(num_blocks), num_warps=tuning.step_warps,
        **pdl_launch(logits, tuning.pdl),
    )  # fmt: skip
