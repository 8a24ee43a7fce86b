# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Rotary embedding fused with the KV-cache write, in Triton: one launch per layer instead of ~14.

Two programs per token, in parallel: one rotates its query heads (rotate-half form), the other
its key heads and, when a cache is given, stores the rotated key and the value at the token's
slot. A single token's decode step is one short dependent chain of loads, so the chain is kept
short: halved over two programs, angles, norm weights and slot loaded before ``pdl_wait``, and v
loaded with k. With per-head norm weights (Qwen3's q_norm / k_norm) each head is RMS-normalised
first, in the same pass::

    slot = slot_mapping[t]  ->  k_cache[slot // B, slot % B] = rope(k[t]);  v_cache[...] = v[t]
    slot < 0  ->  nothing stored (padding rows of a captured batch)

An FP8 cache stores k / k_scale and v / v_scale rounded to E4M3 (``engine.quantization.kv_quant``,
``engine.kernels.e4m3``).

Angles are ``position * inv_freq`` in float32; cos/sin are rounded to the activations' dtype and
every product and the sum are rounded as the torch layer rounds them, so results agree with it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.e4m3 import cache_value
from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.quantization.kv_quant import UNIT_SCALES, KVScales
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["kv_write", "rotary", "rotary_kv_write"]


@triton.jit
def cos_sin(pos_ptr, inv_freq_ptr, dt, HALF: tl.constexpr, D_HALF: tl.constexpr):
    # [1, D_HALF] cos and sin of position * inv_freq (float32), rounded to the activations' dtype.
    j = tl.arange(0, D_HALF)
    angle = tl.load(pos_ptr).to(tl.float32) * tl.load(inv_freq_ptr + j, mask=j < HALF, other=0.0)
    return tl.cos(angle).to(dt).to(tl.float32)[None, :], tl.sin(angle).to(dt).to(tl.float32)[None, :]


@triton.jit
def norm_weights(norm_ptr, HALF: tl.constexpr, D_HALF: tl.constexpr):
    j = tl.arange(0, D_HALF)
    w1 = tl.load(norm_ptr + j, mask=j < HALF, other=0.0).to(tl.float32)[None, :]
    w2 = tl.load(norm_ptr + HALF + j, mask=j < HALF, other=0.0).to(tl.float32)[None, :]
    return w1, w2


@triton.jit
def rotate_halves(x1, x2, cos, sin, w1, w2, eps, HALF: tl.constexpr, NORM: tl.constexpr):
    # x1, x2: [heads, D_HALF] halves of each head -> the rotated halves, in x's dtype.
    dt = x1.dtype
    if NORM:
        # As the RMSNorm layer rounds: normalise in float32, round, times the weight, round.
        b1, b2 = x1.to(tl.float32), x2.to(tl.float32)
        rstd = tl.rsqrt((tl.sum(b1 * b1, 1) + tl.sum(b2 * b2, 1)) / (2 * HALF) + eps)[:, None]
        x1 = ((b1 * rstd).to(dt).to(tl.float32) * w1).to(dt)
        x2 = ((b2 * rstd).to(dt).to(tl.float32) * w2).to(dt)
    a1, a2 = x1.to(tl.float32), x2.to(tl.float32)
    o1 = (a1 * cos).to(dt).to(tl.float32) + (-(a2 * sin)).to(dt).to(tl.float32)
    o2 = (a2 * cos).to(dt).to(tl.float32) + (a1 * sin).to(dt).to(tl.float32)
    return o1.to(dt), o2.to(dt)


@triton.jit
def _heads(ptr, stride_h, num_heads, HALF: tl.constexpr, H_PAD: tl.constexpr, D_HALF: tl.constexpr):
    # [H_PAD, D_HALF] offsets of each head's first half from ptr, and their mask.
    h = tl.arange(0, H_PAD)
    j = tl.arange(0, D_HALF)
    return ptr + h[:, None] * stride_h + j[None, :], (h[:, None] < num_heads) & (j[None, :] < HALF)


@triton.jit
def _rotate_heads(src_ptr, stride_h, dst_ptr, dst_stride_h, num_heads, cos, sin, w1, w2, eps,
                  HALF: tl.constexpr, H_PAD: tl.constexpr, D_HALF: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    src, mask = _heads(src_ptr, stride_h, num_heads, HALF, H_PAD, D_HALF)
    o1, o2 = rotate_halves(tl.load(src, mask=mask, other=0.0), tl.load(src + HALF, mask=mask, other=0.0),
                     cos, sin, w1, w2, eps, HALF, NORM)  # fmt: skip
    dst, _ = _heads(dst_ptr, dst_stride_h, num_heads, HALF, H_PAD, D_HALF)
    tl.store(dst, o1, mask=mask)
    tl.store(dst + HALF, o2, mask=mask)


@triton.jit
def _rotary_kv_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, inv_freq_ptr, q_out_ptr, k_out_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    q_norm_ptr, k_norm_ptr, eps, inv_k_scale, inv_v_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cb, stride_cs, stride_ch, stride_vcb, stride_vcs, stride_vch,
    num_heads, num_kv_heads, block_size,
    HALF: tl.constexpr, H_PAD: tl.constexpr, KV_PAD: tl.constexpr, D_HALF: tl.constexpr,
    WRITE_CACHE: tl.constexpr, ROTATE: tl.constexpr, NORM: tl.constexpr, FP8: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    # Part 0 rotates q; part 1 (the only part without ROTATE) handles k and v.
    q_part = tl.program_id(1) == 0 if ROTATE else tl.program_id(1) < 0
    # Before pdl_wait only what no kernel of this step writes (pdl.py): the angles from the step's
    # positions, the norm weights, the slot; they load while the kernel ahead finishes.
    if ROTATE:
        cos, sin = cos_sin(pos_ptr + t, inv_freq_ptr, q_ptr.dtype.element_ty, HALF, D_HALF)
    else:
        # Identity rotation: x * 1 + (-(y * 0)) is x exactly, so k is stored unchanged.
        cos = tl.full([1, D_HALF], 1.0, tl.float32)
        sin = tl.zeros([1, D_HALF], tl.float32)
    if NORM:  # without a norm the weight pointers stand in for tensors of another size
        if q_part:
            w1, w2 = norm_weights(q_norm_ptr, HALF, D_HALF)
        else:
            w1, w2 = norm_weights(k_norm_ptr, HALF, D_HALF)
    else:
        w1 = tl.full([1, D_HALF], 1.0, tl.float32)
        w2 = w1
    slot = tl.load(slot_ptr + t)  # without a cache, a valid index into another tensor of the step
    pdl_wait(PDL)
    if q_part:
        _rotate_heads(q_ptr + t * stride_qt, stride_qh, q_out_ptr + t * stride_qot, stride_qoh, num_heads,
                      cos, sin, w1, w2, eps, HALF, H_PAD, D_HALF, NORM)  # fmt: skip
    elif not WRITE_CACHE:
        _rotate_heads(k_ptr + t * stride_kt, stride_kh, k_out_ptr + t * stride_kot, stride_koh, num_kv_heads,
                      cos, sin, w1, w2, eps, HALF, KV_PAD, D_HALF, NORM)  # fmt: skip
    elif slot >= 0:
        block = slot // block_size
        offset = slot % block_size
        src, mask = _heads(k_ptr + t * stride_kt, stride_kh, num_kv_heads, HALF, KV_PAD, D_HALF)
        k1 = tl.load(src, mask=mask, other=0.0)
        k2 = tl.load(src + HALF, mask=mask, other=0.0)
        # v loads with k, before any store: one round trip to memory, not two.
        v_src, _ = _heads(v_ptr + t * stride_vt, stride_vh, num_kv_heads, HALF, KV_PAD, D_HALF)
        v1 = tl.load(v_src, mask=mask)
        v2 = tl.load(v_src + HALF, mask=mask)
        o1, o2 = rotate_halves(k1, k2, cos, sin, w1, w2, eps, HALF, NORM)
        dst, _ = _heads(k_cache_ptr + block * stride_cb + offset * stride_cs, stride_ch, num_kv_heads,
                        HALF, KV_PAD, D_HALF)  # fmt: skip
        tl.store(dst, cache_value(o1, inv_k_scale, FP8), mask=mask)
        tl.store(dst + HALF, cache_value(o2, inv_k_scale, FP8), mask=mask)
        v_dst, _ = _heads(v_cache_ptr + block * stride_vcb + offset * stride_vcs, stride_vch, num_kv_heads,
                          HALF, KV_PAD, D_HALF)  # fmt: skip
        tl.store(v_dst, cache_value(v1, inv_v_scale, FP8), mask=mask)
        tl.store(v_dst + HALF, cache_value(v2, inv_v_scale, FP8), mask=mask)


def rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rope(q), rope(k)) as new tensors.

    positions: [num_tokens]; q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads,
    head_dim] (contiguous head_dim); inv_freq: [head_dim / 2] float32.
    """
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _launch(positions, q, k, k, inv_freq, q_out, k_out, None, None, positions, rotate=True, tuning=tuning)
    return q_out, k_out


def rotary_kv_write(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None,
    *,
    scales: KVScales = UNIT_SCALES,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """The fused op: store rope(k) and v at their slots and return rope(q).

    v: [num_tokens, num_kv_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size,
    num_kv_heads, head_dim]; slot_mapping: [num_tokens] int64, negative = do not store.
    ``qk_norm`` = (q weight [head_dim], k weight [head_dim], eps): RMS-normalise every q and k
    head before rotating (Qwen3). A float8_e4m3fn cache stores k / scales.k and v / scales.v.
    """
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    _launch(
        positions,
        q,
        k,
        v,
        inv_freq,
        q_out,
        q_out,
        k_cache,
        v_cache,
        slot_mapping,
        rotate=True,
        qk_norm=qk_norm,
        scales=scales,
        tuning=tuning,
    )
    return q_out


def kv_write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    scales: KVScales = UNIT_SCALES,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> None:
    """Store already-rotated k and v at their slots (the layer's half when RoPE ran before it)."""
    _launch(slot_mapping, k, k, v, slot_mapping, k, k, k_cache, v_cache, slot_mapping, rotate=False,
            scales=scales, tuning=tuning)  # fmt: skip


def _launch(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    inv_freq: torch.Tensor,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
    k_cache: torch.Tensor | None,
    v_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    *,
    rotate: bool,
    qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None,
    scales: KVScales = UNIT_SCALES,
    tuning: CudaTuning,
) -> None:
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError("rotary_kv needs a contiguous head_dim")
    kc = k_cache if k_cache is not None else q_out
    vc = v_cache if v_cache is not None else q_out
    write_cache = k_cache is not None
    fp8 = write_cache and kc.dtype == torch.float8_e4m3fn
    if write_cache and (vc.dtype != kc.dtype or (not fp8 and kc.dtype != k.dtype)):
        raise ValueError(
            f"a KV cache of {kc.dtype} for keys of {k.dtype}: only the same dtype or float8_e4m3fn"
        )
    cache_strides = (*kc.stride()[:3], *vc.stride()[:3]) if write_cache else (0,) * 6
    q_norm, k_norm, eps = qk_norm if qk_norm is not None else (inv_freq, inv_freq, 0.0)
    _rotary_kv_kernel[(num_tokens, 2 if rotate else 1)](
        q, k, v, positions, inv_freq, q_out, k_out, kc, vc, slot_mapping, q_norm, k_norm, eps,
        1.0 / scales.k, 1.0 / scales.v,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        *cache_strides,
        num_heads, k.shape[1], kc.shape[1] if write_cache else 1,
        HALF=head_dim // 2, H_PAD=triton.next_power_of_2(num_heads),
        KV_PAD=triton.next_power_of_2(k.shape[1]), D_HALF=triton.next_power_of_2(head_dim // 2),
        WRITE_CACHE=write_cache, ROTATE=rotate, NORM=qk_norm is not None, FP8=fp8,
        **pdl_launch(q, tuning.pdl),
    )  # fmt: skip
