# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Paged attention in Triton: one kernel for decode, prefill and extend (cached prefix), split-K.

Each program owns one KV head of one sequence, a tile of that sequence's new query tokens, and
one split of the keys those tokens may see. Its rows are (query token, query head of the KV
head's group) pairs, so a GQA group shares every K/V tile it loads::

    rows:  [q0 h0, q0 h1, ..., q0 hG-1, q1 h0, ...]   BLOCK_Q tokens x GROUP heads (padded to M)
    keys:  [kv_lo ............................ kv_end)  this tile's causal range, cut in NUM_SPLITS
    K/V:   token t of the sequence lives at block_tables[seq, t // B], slot t % B

With one split the program writes the normalised output; with several (decode over long
contexts, flash-decoding) each writes its partial output and log-sum-exp, merged by
``split_merge``. (Merging in the attention kernel, by the last split to finish, measured no faster:
bench/BENCHMARKS.md.) At decode batches under 16 the first K/V tile may be loaded before
``pdl_wait``, while the kernel ahead still runs (``CudaTuning.prefetch_small_batch``).

``decode_attention`` (small decode batches) also does the RoPE kernel's work: each program
[norms and] rotates its query heads and the new key in registers, the split whose keys include
the new position stores that key and value in the cache, and every program takes the new key
from registers, never from the cache it may still be writing::

    before:  qkv GEMM -> RoPE + KV write -> attention -> merge
    after:   qkv GEMM -> attention (RoPE, KV write inside) -> merge

An FP8 cache (float8_e4m3fn, ``engine.quantization.kv_quant``) holds K / k_scale and V / v_scale:
each tile widens exactly, k_scale folds into the softmax scale and v_scale into the output. With
16-bit activations the tiles widen to f16 and both dots run in f16 (q and the probabilities
converted once a tile): Hopper widens E4M3 pairs to f16 in one instruction, and bf16 would take
one more per element, which made the loop slower than a bf16 cache's although it reads half the
bytes (bench/BENCHMARKS.md). Where a row is whole 64-byte-aligned int32 words the tiles load as
words and widen in registers (``CudaTuning.fp8_kv_widen_asm``): a cast of the FP8 tile is moved
by the compiler into the dot's operand loads, one byte-wise shared load per value. float32
activations widen to float32, as a float32 cache's loop. The fused decode stores its new key and value rounded as the RoPE kernel does, and joins them to the keys
rounded too, so it sees what a later step will read back.

Everything the grid depends on is fixed by the host-side batch shape (number of sequences,
longest query), never by context lengths, so a decode step can be graph-captured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.e4m3 import cache_value, widen_words_f16
from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.kernels.rotary_kv import cos_sin, norm_weights, rotate_halves
from engine.kernels.split_merge import PendingMerge
from engine.quantization.kv_quant import UNIT_SCALES, KVScales
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["NewTokenRope", "decode_attention", "paged_attention"]


# The block tables' width and the query tiles per sequence change with every step; specialized
# (Triton compiles a variant for an integer equal to 1 or divisible by 16) they compiled new variants
# in the middle of serving, each a stall of the step loop. Neither feeds a vector access.
@triton.jit(do_not_specialize=["stride_bt", "num_q_tiles"])
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, tables_ptr, ctx_ptr, starts_ptr,
    scale, window, k_scale, v_scale, inv_k_scale, inv_v_scale,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_bt, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    num_q_tiles,
    new_k_ptr, new_v_ptr, pos_ptr, slot_ptr, inv_freq_ptr, q_norm_ptr, k_norm_ptr, eps,
    stride_nkt, stride_nkh, stride_nvt, stride_nvh,
    GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, M: tl.constexpr, HEAD_DIM: tl.constexpr,
    D: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, PREFETCH: tl.constexpr,
    ROPE: tl.constexpr, NORM: tl.constexpr, FP8: tl.constexpr, DOT_F16: tl.constexpr, WIDEN_ASM: tl.constexpr,
    INTERPRETED: tl.constexpr, PDL: tl.constexpr,
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
                                    BLOCK_SIZE, WIDEN_ASM, INTERPRETED)  # fmt: skip
    if ROPE:
        # Decode with this step's q, k, v un-rotated: one token per sequence, at q_start.
        cos, sin, q_w1, q_w2, k_w1, k_w2, slot = _rope_inputs(pos_ptr, slot_ptr, inv_freq_ptr, q_norm_ptr,
                                                              k_norm_ptr, q_start, q_ptr.dtype.element_ty,
                                                              HEAD_DIM // 2, NORM)  # fmt: skip
    pdl_wait(PDL)
    if ROPE:
        q, k_new, v_new = _rope_new_token(q_ptr, new_k_ptr, new_v_ptr, q_start, head, row_ok, kv_head, d,
                                          stride_qt, stride_qh, stride_nkt, stride_nkh, stride_nvt, stride_nvh,
                                          cos, sin, q_w1, q_w2, k_w1, k_w2, eps, HEAD_DIM // 2, NORM)  # fmt: skip
        # What the cache holds for them (an FP8 cache: E4M3 of k / k_scale), stored and joined.
        k_new = cache_value(k_new, inv_k_scale, FP8)
        v_new = cache_value(v_new, inv_v_scale, FP8)
        if (lo <= ctx - 1) & (ctx - 1 < hi) & (slot >= 0):
            # The split that holds the new key stores it; the others never read its slot.
            dst = (slot // BLOCK_SIZE) * stride_kb + (slot % BLOCK_SIZE) * stride_ks + d[None, :]
            tl.store(k_ptr + kv_head * stride_kh + dst, k_new)
            v_dst = (slot // BLOCK_SIZE) * stride_vb + (slot % BLOCK_SIZE) * stride_vs + d[None, :]
            tl.store(v_ptr + kv_head * stride_vh + v_dst, v_new)
    else:
        q = tl.load(
            q_ptr + (q_start + qi)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
            mask=row_ok[:, None] & d_ok[None, :],
            other=0.0,
        )  # [M, D]
    if UPCAST:
        q = q.to(tl.float32)
    elif DOT_F16:  # an FP8 cache under 16-bit activations (module docstring)
        q = q.to(tl.float16)

    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, D], tl.float32)
    for tile in range(lo, hi, TILE_N):
        t = tile + n  # [TILE_N] key positions
        if PREFETCH:
            # With ROPE the new key comes from registers below, so the early tile always serves.
            if (tile == lo) & (ROPE or (tile + TILE_N <= ctx - q_len)):
                k, v = k_first, v_first
            else:
                k, v = _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
                                stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                                BLOCK_SIZE, WIDEN_ASM, INTERPRETED)  # fmt: skip
        else:
            k, v = _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
                            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                            BLOCK_SIZE, WIDEN_ASM, INTERPRETED)  # fmt: skip
        t_ok = t < hi
        if DOT_F16:  # E4M3 widens exactly; the scales are applied to the scores and the output
            if not WIDEN_ASM:  # (widened as they loaded otherwise)
                k = k.to(tl.float16)
                v = v.to(tl.float16)
        elif FP8:
            k = k.to(q_ptr.dtype.element_ty)
            v = v.to(q_ptr.dtype.element_ty)
        if ROPE:
            is_new = (t == ctx - 1)[:, None]
            k = tl.where(is_new, k_new.to(k.dtype), k)
            v = tl.where(is_new, v_new.to(v.dtype), v)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * (scale * k_scale)  # [M, TILE_N]
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
    if FP8:
        out = out * v_scale
    out_mask = row_ok[:, None] & d_ok[None, :]
    out_ptrs = (
        out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + split * stride_os + d[None, :]
    )
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
    if NUM_SPLITS > 1:
        lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + token * stride_lt + head * stride_lh + split, lse, mask=row_ok)


@triton.jit
def _rope_inputs(pos_ptr, slot_ptr, inv_freq_ptr, q_norm_ptr, k_norm_ptr, token, dt,
                 HALF: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    # What RoPE needs of the step's inputs and weights, none written by a kernel (read before the wait).
    cos, sin = cos_sin(pos_ptr + token, inv_freq_ptr, dt, HALF, HALF)
    if NORM:  # without a norm the weight pointers stand in for tensors of another size
        q_w1, q_w2 = norm_weights(q_norm_ptr, HALF, HALF)
        k_w1, k_w2 = norm_weights(k_norm_ptr, HALF, HALF)
    else:
        q_w1 = tl.full([1, HALF], 1.0, tl.float32)
        q_w2, k_w1, k_w2 = q_w1, q_w1, q_w1
    return cos, sin, q_w1, q_w2, k_w1, k_w2, tl.load(slot_ptr + token)


@triton.jit
def _rope_new_token(q_ptr, k_ptr, v_ptr, token, head, row_ok, kv_head, d,
                    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                    cos, sin, q_w1, q_w2, k_w1, k_w2, eps, HALF: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    # The token's query rows [M, D] and its key and value of kv_head [1, D], normed and rotated as
    # the RoPE/KV kernel does (the same helper), halves joined back into whole heads.
    j = tl.arange(0, HALF)
    q_src = q_ptr + token * stride_qt + head[:, None] * stride_qh + j[None, :]
    q1 = tl.load(q_src, mask=row_ok[:, None], other=0.0)
    q2 = tl.load(q_src + HALF, mask=row_ok[:, None], other=0.0)
    k_src = k_ptr + token * stride_kt + kv_head * stride_kh + j[None, :]
    k1 = tl.load(k_src)
    k2 = tl.load(k_src + HALF)
    v = tl.load(v_ptr + token * stride_vt + kv_head * stride_vh + d[None, :])
    o1, o2 = rotate_halves(q1, q2, cos, sin, q_w1, q_w2, eps, HALF, NORM)
    c1, c2 = rotate_halves(k1, k2, cos, sin, k_w1, k_w2, eps, HALF, NORM)
    return _whole_heads(o1, o2), _whole_heads(c1, c2), v


@triton.jit
def _whole_heads(x1, x2):
    # [R, HALF] first and second halves -> [R, 2 * HALF]
    return tl.reshape(tl.permute(tl.join(x1, x2), (0, 2, 1)), (x1.shape[0], 2 * x1.shape[1]))


@triton.jit
def _load_kv(k_ptr, v_ptr, tables_ptr, seq, tile, hi, n, d, d_ok, kv_head, stride_bt,
             stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
             BLOCK_SIZE: tl.constexpr, WIDEN_ASM: tl.constexpr, INTERPRETED: tl.constexpr):  # fmt: skip
    # K and V of keys [tile, tile + TILE_N) below hi: [TILE_N, D] each, zeros past hi.
    t = tile + n
    t_ok = t < hi
    # int64: block * stride(0) passes 2**31 elements once the pool is larger than 4 GiB (bf16).
    block = tl.load(tables_ptr + seq * stride_bt + t // BLOCK_SIZE, mask=t_ok, other=0).to(tl.int64)
    slot = t % BLOCK_SIZE
    if WIDEN_ASM:  # an FP8 cache read as int32 words, four values each, widened to f16 here
        w = tl.arange(0, d.shape[0] // 4)  # (the host takes this path when D is head_dim)
        k_words = k_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        v_words = v_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        # Rows start on 64-byte boundaries (the host checks the strides): 16-byte vector loads.
        k_row = tl.multiple_of((block * stride_kb + slot * stride_ks + kv_head * stride_kh) // 4, 16)
        v_row = tl.multiple_of((block * stride_vb + slot * stride_vs + kv_head * stride_vh) // 4, 16)
        k = tl.load(k_words + k_row[:, None] + w[None, :], mask=t_ok[:, None], other=0)
        v = tl.load(v_words + v_row[:, None] + w[None, :], mask=t_ok[:, None], other=0)
        k, v = widen_words_f16(k, INTERPRETED), widen_words_f16(v, INTERPRETED)
    else:
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


@dataclass(frozen=True)
class NewTokenRope:
    """A decode step's un-rotated keys and values, and what RoPE and the cache write need."""

    k: torch.Tensor
    """[num_tokens, num_kv_heads, head_dim], before RoPE."""
    v: torch.Tensor
    positions: torch.Tensor
    """[num_tokens]."""
    slot_mapping: torch.Tensor
    """[num_tokens] int64, negative = not stored (padding)."""
    inv_freq: torch.Tensor
    """[head_dim / 2] float32."""
    qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None
    """(q weight, k weight, eps): Qwen3's per-head RMSNorm before RoPE."""


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
    scales: KVScales = UNIT_SCALES,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its paged context.

    q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size, num_kv_heads,
    head_dim] (the pool's strided views); block_tables: [num_seqs, max_blocks] int32;
    context_lens: [num_seqs] int32; query_starts: [num_seqs + 1] int32. ``num_splits`` (a power
    of two) cuts each sequence's keys for more parallelism when there are few query tokens.
    ``tile_n`` (keys per loop step), ``num_warps`` and ``num_stages`` override the tuned launch
    shape (benchmark sweeps). A float8_e4m3fn cache holds K / scales.k and V / scales.v.
    Returns [num_tokens, num_heads, head_dim] in q's dtype.
    """
    out = _attend(q, (k_cache, v_cache), (block_tables, context_lens, query_starts), None,
                  max_query_len=max_query_len, scale=scale, sliding_window=sliding_window, num_splits=num_splits,
                  tuning=tuning, tile_n=tile_n, num_warps=num_warps, num_stages=num_stages,
                  scales=scales)  # fmt: skip
    return out if isinstance(out, torch.Tensor) else out.merge_into(torch.empty_like(q), tuning)


def decode_attention(
    q: torch.Tensor,
    new: NewTokenRope,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    query_starts: torch.Tensor,
    *,
    scale: float,
    sliding_window: int | None = None,
    num_splits: int = 1,
    defer_merge: bool = False,
    scales: KVScales = UNIT_SCALES,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor | PendingMerge:
    """A decode step (one new token per sequence) with its RoPE and cache write inside: each
    program [norms and] rotates its query heads and the new key itself, the split that holds the
    new key's position stores it and v, and the new key joins the keys from registers.

    q: [num_seqs, num_heads, head_dim] un-rotated; head_dim a power of two. Returns what
    ``paged_attention`` returns, or with ``defer_merge`` and several splits the ``PendingMerge``
    of the partials for the next GEMM.
    """
    head_dim = q.shape[2]
    if head_dim & (head_dim - 1) or q.shape[0] != block_tables.shape[0]:
        raise ValueError("decode_attention takes one token per sequence and a power-of-two head_dim")
    if new.k.stride(2) != 1 or new.v.stride(2) != 1:
        raise ValueError("decode_attention needs a contiguous head_dim")
    if new.slot_mapping.dtype != torch.int64:
        raise ValueError("decode_attention needs int64 slots (a large pool overflows int32)")
    out = _attend(q, (k_cache, v_cache), (block_tables, context_lens, query_starts), new, max_query_len=1,
                  scale=scale, sliding_window=sliding_window, num_splits=num_splits, tuning=tuning,
                  scales=scales)  # fmt: skip
    if isinstance(out, torch.Tensor) or defer_merge:
        return out
    return out.merge_into(torch.empty_like(q), tuning)


def _attend(
    q: torch.Tensor,
    caches: tuple[torch.Tensor, torch.Tensor],
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    new: NewTokenRope | None,
    *,
    max_query_len: int,
    scale: float,
    sliding_window: int | None,
    num_splits: int,
    tuning: CudaTuning,
    tile_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    scales: KVScales = UNIT_SCALES,
) -> torch.Tensor | PendingMerge:
    # The kernel's launch: its output, or its partials when it splits the keys.
    # caches: (k_cache, v_cache); batch: (block_tables, context_lens, query_starts)
    (k_cache, v_cache), (block_tables, context_lens, query_starts) = caches, batch
    num_tokens, num_heads, head_dim = q.shape
    num_seqs = block_tables.shape[0]
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("paged_attention needs a contiguous head_dim")
    if num_splits < 1 or num_splits & (num_splits - 1):
        raise ValueError("num_splits must be a power of two")
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    kv_scales = (scales.k, scales.v) if fp8 else (1.0, 1.0)  # a plain cache holds K and V themselves
    if v_cache.dtype != k_cache.dtype or (not fp8 and k_cache.dtype != q.dtype):
        raise ValueError(
            f"a KV cache of {k_cache.dtype} for queries of {q.dtype}: only the same dtype or float8_e4m3fn"
        )
    group = num_heads // num_kv_heads
    # Two variants per model (decode, and everything else), so few compile at first use.
    block_q = 1 if max_query_len == 1 else max(1, 64 // group)
    m = max(16, triton.next_power_of_2(block_q * group))
    num_q_tiles = triton.cdiv(max_query_len, block_q)
    if num_splits == 1:
        out = torch.empty_like(q)
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
    small_decode = max_query_len == 1 and num_seqs < 16
    if max_query_len == 1 and not small_decode:
        # Decode over a batch: 64-key tiles in two stages come nearest the copy ceiling
        # (bench.engine.attention_sweep); tiny batches keep their own tiles.
        launch.setdefault("num_stages", 2)
    elif small_decode:
        tile_n = tile_n or tuning.small_batch_tile_n
        launch.setdefault("num_warps", tuning.small_batch_warps)
    tile_n = tile_n or 64
    if new is None:  # the RoPE arguments stand in for tensors the kernel never reads
        rope: tuple[object, ...] = (q, q, context_lens, context_lens, lse, lse, lse, 0.0, 0, 0, 0, 0)
    else:
        q_norm, k_norm, eps = new.qk_norm if new.qk_norm is not None else (new.inv_freq, new.inv_freq, 0.0)
        rope = (new.k, new.v, new.positions, new.slot_mapping, new.inv_freq, q_norm, k_norm, eps,
                new.k.stride(0), new.k.stride(1), new.v.stride(0), new.v.stride(1))  # fmt: skip
    # An FP8 cache with RoPE in the kernel always prefetches: on the H200 the variant without the
    # early tile disagreed with the unfused kernels (bench/BENCHMARKS.md, the FP8 KV cache on the
    # GPU). Not understood yet, so not offered.
    prefetch = small_decode and (tuning.prefetch_small_batch or (fp8 and new is not None))
    dot_f16 = fp8 and q.dtype != torch.float32
    # Rows of whole int32 words on 64-byte boundaries: head_dim a power of two and strides too
    # (checked only where the words would be read).
    widen_asm = (
        dot_f16
        and tuning.fp8_kv_widen_asm
        and d == head_dim
        and all(c.stride(i) % 64 == 0 for c in (k_cache, v_cache) for i in range(3))
    )
    _attention_kernel[grid](
        q, k_cache, v_cache, part, lse, block_tables, context_lens, query_starts,
        scale, sliding_window or 0, *kv_scales, 1.0 / kv_scales[0], 1.0 / kv_scales[1],
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0), part.stride(0), part.stride(1), part.stride(2),
        lse.stride(0), lse.stride(1),
        num_q_tiles, *rope,
        GROUP=group, BLOCK_Q=block_q, M=m, HEAD_DIM=head_dim, D=d, BLOCK_SIZE=block_size,
        TILE_N=tile_n, NUM_SPLITS=num_splits,
        HAS_WINDOW=sliding_window is not None,
        PRECISION="ieee" if q.dtype == torch.float32 or interpreted else "tf32",
        # The interpreter's numpy has no bfloat16 dot but an f16 one: the f16 path runs as on a GPU.
        UPCAST=interpreted and not dot_f16,
        PREFETCH=prefetch,
        ROPE=new is not None, NORM=new is not None and new.qk_norm is not None, FP8=fp8, DOT_F16=dot_f16,
        WIDEN_ASM=widen_asm, INTERPRETED=interpreted,
        **launch, **pdl_launch(q, tuning.pdl),
    )  # fmt: skip
    return PendingMerge(part, lse, q.dtype) if num_splits > 1 else out
