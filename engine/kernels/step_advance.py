# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""The last kernel of a greedy decode graph: the token, and the next step's inputs, on the device.

At one sequence the host's share of a decode step costs the GPU more than any kernel does: the
token's argmax, its copy back, the next step's input copy and the token's scatter into it are
each a separate operation on the stream between two graph replays. With this kernel at the end of
the graph, each row of the static inputs (``engine.cuda_graph_runner``) leaves the replay ready for
the next one::

    token      = argmax over the row's keys (engine.kernels.argmax)
    token_ids  = token            the next step's input, in place
    out        = token            a ring slot the host copies from, off the step's stream
    positions += 1, context_lens += 1
    slots      = block_tables[row, position // block_size] * block_size + position % block_size

Padding rows (context length 0) keep their inputs: no KV write, no keys. When the next step is
the same rows one position on and no row needs a block its table does not hold yet, the host
copies nothing; otherwise it stages the inputs as usual, overwriting all of this.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.argmax import key_index
from engine.kernels.pdl import pdl_launch, pdl_wait

__all__ = ["step_advance"]

_MAX_BLOCK = 8192


@triton.jit
def _step_advance_kernel(
    keys_ptr, token_ptr, out_ptr, pos_ptr, ctx_ptr, slot_ptr, table_ptr,
    num_keys, stride_keys, stride_table, width, block_size,
    BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    # Everything here is written by this step (keys) or read by its earlier kernels (inputs).
    pdl_wait(PDL)
    # One load in flight for all of a row's keys (8,192 at most): each round trip is a microsecond.
    best = tl.load(keys_ptr + row * stride_keys + c, mask=c < num_keys, other=-1)
    for start in range(BLOCK, num_keys, BLOCK):
        keys = tl.load(keys_ptr + row * stride_keys + start + c, mask=start + c < num_keys, other=-1)
        best = tl.maximum(best, keys)
    token = key_index(tl.max(best, 0))
    tl.store(token_ptr + row, token)
    tl.store(out_ptr + row, token)
    ctx = tl.load(ctx_ptr + row)
    if ctx > 0:
        pos = tl.load(pos_ptr + row) + 1
        tl.store(pos_ptr + row, pos)
        tl.store(ctx_ptr + row, ctx + 1)
        # Past the table's width the host stages anyway (the sequence is at its length limit).
        block = tl.load(table_ptr + row * stride_table + tl.minimum(pos // block_size, width - 1))
        tl.store(slot_ptr + row, block.to(tl.int64) * block_size + pos % block_size)


def step_advance(
    keys: torch.Tensor,
    token_ids: torch.Tensor,
    out: torch.Tensor,
    positions: torch.Tensor,
    context_lens: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
) -> None:
    """Greedy tokens from ``keys`` [rows, parts] into ``token_ids`` and ``out`` [rows] int64, and
    ``positions``, ``context_lens``, ``slot_mapping`` [rows] moved one token on (see module doc)."""
    rows = token_ids.shape[0]
    for name, t in (("out", out), ("positions", positions), ("slot_mapping", slot_mapping)):
        if t.shape != (rows,) or t.dtype != torch.int64:
            raise ValueError(f"{name} must be [{rows}] int64, got {tuple(t.shape)} {t.dtype}")
    if context_lens.shape != (rows,) or block_tables.shape[0] != rows or keys.shape[0] != rows:
        raise ValueError("keys, context_lens and block_tables must have one row per token")
    if rows == 0:
        return
    block = min(_MAX_BLOCK, triton.next_power_of_2(keys.shape[1]))
    _step_advance_kernel[(rows,)](
        keys, token_ids, out, positions, context_lens, slot_mapping, block_tables,
        keys.shape[1], keys.stride(0), block_tables.stride(0), block_tables.shape[1], block_size,
        BLOCK=block, num_warps=max(1, min(16, block // 512)), **pdl_launch(keys),
    )  # fmt: skip
