# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Paged attention in Triton: one kernel for decode, prefill and extend (cached prefix), split-K.

Each program owns one KV head of one sequence, a tile of that sequence's new query tokens, and
one split of the keys those tokens may see. Its rows are (query token, query head of the KV
head's group) pairs, so a GQA group shares every K/V tile it loads::

    rows:  [q0 h0, q0 h1, ..., q0 hG-1, q1 h0, ...]   BLOCK_Q tokens x GROUP heads (padded to M)
    keys:  [kv_lo ............................ kv_end)  this tile's causal range, cut in NUM_SPLITS
    K/V:   token t of the sequence lives at block_tables[seq, t // B], slot t % B

With one split the program writes the normalised output; with several (decode over long
contexts, flash-decoding) each writes its partial output and log-sum-exp and a second kernel
merges them. (Merging in the attention kernel, by the last split to finish, measured no faster at
one sequence and 2 % slower at eight on an H200: the merge stays a launch of its own.) At
decode batches under 16 the first K/V tile is loaded before ``pdl_wait``, while the RoPE kernel
ahead still runs, and loaded again only if it holds this step's new keys. Everything the grid depends on is fixed by the host-side batch shape (number of
sequences, longest query), never by context lengths, so a decode step can be graph-captured.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait

__all__ = ["paged_attention"]

PREFETCH_SMALL_BATCH = True
"""Decode of under 16 sequences: the first K/V tile is loaded before ``pdl_wait``."""


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, tables_ptr, ctx_ptr, starts_ptr,
    scale, window,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_bt, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    num_q_tiles,
    GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, M: tl.constexpr, HEAD_DIM: tl.constexpr,
    D: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, PREFETCH: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0) // num_q_tiles
    q_tile = tl.program_id(0) % num_q_tiles
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    # The step's inputs (query starts, context lengths, block tables) and the cache outside this
    # step's new tokens are read before pdl_wait (see pdl.py); q and the new keys after it.
    q_start = tl.load(starts_ptr + seq)
    q_len = tl.load(starts_ptr + seq + 1) - q_start
    ctx = tl.load(ctx_ptr + seq)
    if q_tile * BLOCK_Q >= q_len:
        pdl_wait(PDL)
        return
    rows = tl.arange(0, M)
    qi = q_tile * BLOCK_Q + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    row_ok = (rows < BLOCK_Q * GROUP) & (qi < q_len)
    q_pos = ctx - q_len + qi  # [M]: each row's absolute position
    d = tl.arange(0, D)
    d_ok = d < HEAD_DIM

    kv_end = ctx - q_len + tl.minimum(q_len, (q_tile + 1) * BLOCK_Q)
    kv_lo = 0
    if HAS_WINDOW:
        kv_lo = tl.maximum(0, ctx - q_len + q_tile * BLOCK_Q - window + 1)
    per_split = tl.cdiv(tl.cdiv(kv_end - kv_lo, NUM_SPLITS), TILE_N) * TILE_N
    lo = kv_lo + split * per_split
    hi = tl.minimum(lo + per_split, kv_end)
    n = tl.arange(0, TILE_N)
    if PREFETCH:
        # The first tile streams in while the kernel ahead (which writes q and the new keys)
        # finishes; a tile that holds any of this step's new keys is loaded again after the wait.
        k_first, v_first = _load_kv(k_ptr, v_ptr, tables_ptr, seq, lo, hi, n, d, d_ok, kv_head, stride_bt,
                                    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                                    BLOCK_SIZE)  # fmt: skip
    pdl_wait(PDL)
    q = tl.load(
        q_ptr + (q_start + qi)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )  # [M, D]
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, D], tl.float32)
    for tile in range(lo, hi, TILE_N):
        t = tile + n  # [TILE_N] key positions
        if PREFETCH:
            if (tile == lo) & (tile + TILE_N <= ctx - q_len):
                k, v = k_first, v_first
            else:
                k, v = _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
                                stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                                BLOCK_SIZE)  # fmt: skip
        else:
            k, v = _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
                            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                            BLOCK_SIZE)  # fmt: skip
        t_ok = t < hi
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [M, TILE_N]
        allowed = t_ok[None, :] & (t[None, :] <= q_pos[:, None])
        if HAS_WINDOW:
            allowed &= q_pos[:, None] - t[None, :] < window
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with no allowed key yet keeps m = -inf; shift it by 0 so exp gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    token = q_start + qi
    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    out_mask = row_ok[:, None] & d_ok[None, :]
    out_ptrs = (
        out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + split * stride_os + d[None, :]
    )
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
    if NUM_SPLITS > 1:
        lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + token * stride_lt + head * stride_lh + split, lse, mask=row_ok)


@triton.jit
def _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
             stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
             BLOCK_SIZE: tl.constexpr):  # fmt: skip
    # K and V of keys [tile, tile + TILE_N) below hi: [TILE_N, D] each, zeros past hi.
    t = tile + n
    t_ok = t < hi
    # int64: block * stride(0) passes 2**31 elements once the pool is larger than 4 GiB (bf16).
    block = tl.load(tables_ptr + seq * stride_bt + t // BLOCK_SIZE, mask=t_ok, other=0).to(tl.int64)
    slot = t % BLOCK_SIZE
    kv_mask = t_ok[:, None] & d_ok[None, :]
    k = tl.load(
        k_ptr + block[:, None] * stride_kb + slot[:, None] * stride_ks + kv_head * stride_kh + d[None, :],
        mask=kv_mask,
        other=0.0,
    )
    v = tl.load(
        v_ptr + block[:, None] * stride_vb + slot[:, None] * stride_vs + kv_head * stride_vh + d[None, :],
        mask=kv_mask,
        other=0.0,
    )
    return k, v


@triton.jit
def _merge_kernel(
    part_ptr, lse_ptr, out_ptr,
    stride_pt, stride_ph, stride_ps, stride_lt, stride_lh, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_wait(PDL)
    token = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, NUM_SPLITS)
    d = tl.arange(0, D)
    lse = tl.load(lse_ptr + token * stride_lt + head * stride_lh + s)  # [NUM_SPLITS]
    m = tl.max(lse, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m)
    total = tl.sum(w, 0)
    part = tl.load(
        part_ptr + token * stride_pt + head * stride_ph + s[:, None] * stride_ps + d[None, :],
        mask=d[None, :] < HEAD_DIM,
        other=0.0,
    )  # [NUM_SPLITS, D]
    out = tl.sum(part * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + token * stride_ot + head * stride_oh + d,
        out.to(out_ptr.dtype.element_ty),
        mask=d < HEAD_DIM,
    )


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_starts: torch.Tensor,
    *,
    max_query_len: int,
    scale: float,
    sliding_window: int | None = None,
    num_splits: int = 1,
    tile_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its paged context.

    q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size, num_kv_heads,
    head_dim] (the pool's strided views); block_tables: [num_seqs, max_blocks] int32;
    context_lens: [num_seqs] int32; query_starts: [num_seqs + 1] int32. ``num_splits`` (a power
    of two) cuts each sequence's keys for more parallelism when there are few query tokens.
    ``tile_n`` (keys per loop step), ``num_warps`` and ``num_stages`` override the tuned launch
    shape (benchmark sweeps).
    Returns [num_tokens, num_heads, head_dim] in q's dtype.
    """
    num_tokens, num_heads, head_dim = q.shape
    num_seqs = block_tables.shape[0]
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("paged_attention needs a contiguous head_dim")
    if num_splits < 1 or num_splits & (num_splits - 1):
        raise ValueError("num_splits must be a power of two")
    group = num_heads // num_kv_heads
    # Two variants per model (decode, and everything else), so few compile at first use.
    block_q = 1 if max_query_len == 1 else max(1, 64 // group)
    m = max(16, triton.next_power_of_2(block_q * group))
    num_q_tiles = triton.cdiv(max_query_len, block_q)
    out = torch.empty_like(q)
    if num_splits == 1:
        part, lse = out.unsqueeze(2), out.new_empty(0, 1, 1, dtype=torch.float32)
    else:
        part = torch.empty(num_tokens, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_tokens, num_heads, num_splits, dtype=torch.float32, device=q.device)
    d = triton.next_power_of_2(head_dim)
    # CPU tensors only get here under TRITON_INTERPRET, whose numpy dot has no bfloat16.
    interpreted = q.device.type == "cpu"
    grid = (num_seqs * num_q_tiles, num_kv_heads, num_splits)
    launch: dict[str, int] = {}
    if num_warps is not None:
        launch["num_warps"] = num_warps
    if num_stages is not None:
        launch["num_stages"] = num_stages
    if max_query_len == 1 and num_seqs >= 16:
        # Decode over a batch: 64-key tiles, two stages reach ~0.95 of the copy ceiling on an H200
        # where 32-key tiles reach ~0.82 (bench.attention_sweep, run 4); tiny batches keep 32.
        tile_n = tile_n or 64
        launch.setdefault("num_stages", 2)
    tile_n = tile_n or (32 if max_query_len == 1 else 64)
    _attention_kernel[grid](
        q, k_cache, v_cache, part, lse, block_tables, context_lens, query_starts,
        scale, sliding_window or 0,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0), part.stride(0), part.stride(1), part.stride(2),
        lse.stride(0), lse.stride(1),
        num_q_tiles,
        GROUP=group, BLOCK_Q=block_q, M=m, HEAD_DIM=head_dim, D=d, BLOCK_SIZE=block_size,
        TILE_N=tile_n, NUM_SPLITS=num_splits,
        HAS_WINDOW=sliding_window is not None,
        PRECISION="ieee" if q.dtype == torch.float32 or interpreted else "tf32",
        UPCAST=interpreted,
        PREFETCH=PREFETCH_SMALL_BATCH and max_query_len == 1 and num_seqs < 16,
        **launch, **pdl_launch(q),
    )  # fmt: skip
    if num_splits > 1:
        _merge_kernel[(num_tokens, num_heads)](
            part, lse, out,
            part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, D=d, NUM_SPLITS=num_splits, **pdl_launch(q),
        )  # fmt: skip
    return out
