# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Rotary embedding fused with the KV-cache write, in Triton: one launch per layer instead of ~14.

Two programs per token, in parallel: one rotates its query heads (rotate-half form), the other
its key heads and, when a cache is given, stores the rotated key and the value at the token's
slot (a single token's decode step is one short dependent chain of loads, so halving it counts). With per-head norm
weights (Qwen3's q_norm / k_norm) each head is RMS-normalised first, in the same pass::

    slot = slot_mapping[t]  ->  k_cache[slot // B, slot % B] = rope(k[t]);  v_cache[...] = v[t]
    slot < 0  ->  nothing stored (padding rows of a captured batch)

Angles are ``position * inv_freq`` in float32; cos/sin are rounded to the activations' dtype and
every product and the sum are rounded as the torch layer rounds them, so results agree with it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait

__all__ = ["kv_write", "rotary", "rotary_kv_write"]


@triton.jit
def _rotate(x_ptr, out_ptr, stride_t, stride_h, out_stride_t, out_stride_h, t, num_heads, cos, sin,
            norm_ptr, eps,
            HALF: tl.constexpr, H_PAD: tl.constexpr, D_HALF: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    h = tl.arange(0, H_PAD)
    j = tl.arange(0, D_HALF)
    mask = (h[:, None] < num_heads) & (j[None, :] < HALF)
    base = x_ptr + t * stride_t + h[:, None] * stride_h + j[None, :]
    x1 = tl.load(base, mask=mask, other=0.0)
    x2 = tl.load(base + HALF, mask=mask, other=0.0)
    dt = x1.dtype
    if NORM:
        # As the RMSNorm layer rounds: normalise in float32, round, times the weight, round.
        b1, b2 = x1.to(tl.float32), x2.to(tl.float32)
        rstd = tl.rsqrt((tl.sum(b1 * b1, 1) + tl.sum(b2 * b2, 1)) / (2 * HALF) + eps)[:, None]
        w1 = tl.load(norm_ptr + j, mask=j < HALF, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(norm_ptr + HALF + j, mask=j < HALF, other=0.0).to(tl.float32)[None, :]
        x1 = ((b1 * rstd).to(dt).to(tl.float32) * w1).to(dt)
        x2 = ((b2 * rstd).to(dt).to(tl.float32) * w2).to(dt)
    a1, a2 = x1.to(tl.float32), x2.to(tl.float32)
    o1 = (a1 * cos).to(dt).to(tl.float32) + (-(a2 * sin)).to(dt).to(tl.float32)
    o2 = (a2 * cos).to(dt).to(tl.float32) + (a1 * sin).to(dt).to(tl.float32)
    dst = out_ptr + t * out_stride_t + h[:, None] * out_stride_h + j[None, :]
    tl.store(dst, o1.to(dt), mask=mask)
    tl.store(dst + HALF, o2.to(dt), mask=mask)


@triton.jit
def _rotary_kv_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, inv_freq_ptr, q_out_ptr, k_out_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    q_norm_ptr, k_norm_ptr, eps,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cb, stride_cs, stride_ch, stride_vcb, stride_vcs, stride_vch,
    num_heads, num_kv_heads, block_size,
    HALF: tl.constexpr, H_PAD: tl.constexpr, KV_PAD: tl.constexpr, D_HALF: tl.constexpr,
    WRITE_CACHE: tl.constexpr, ROTATE: tl.constexpr, NORM: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_wait(PDL)
    t = tl.program_id(0).to(tl.int64)
    # Part 0 rotates q; part 1 (the only part without ROTATE) handles k and v.
    kv_part = tl.program_id(1) == (1 if ROTATE else 0)
    j = tl.arange(0, D_HALF)
    if ROTATE:
        inv_freq = tl.load(inv_freq_ptr + j, mask=j < HALF, other=0.0)
        angle = tl.load(pos_ptr + t).to(tl.float32) * inv_freq
        dt = q_ptr.dtype.element_ty
        cos = tl.cos(angle).to(dt).to(tl.float32)[None, :]
        sin = tl.sin(angle).to(dt).to(tl.float32)[None, :]
        if tl.program_id(1) == 0:
            _rotate(q_ptr, q_out_ptr, stride_qt, stride_qh, stride_qot, stride_qoh, t, num_heads, cos, sin,
                    q_norm_ptr, eps, HALF, H_PAD, D_HALF, NORM)  # fmt: skip
    else:
        # Identity rotation: x * 1 + (-(y * 0)) is x exactly, so k is stored unchanged.
        cos = tl.full([1, D_HALF], 1.0, tl.float32)
        sin = tl.zeros([1, D_HALF], tl.float32)
    # Nested ifs keep compile-time flags apart from the run-time kv_part (Triton's ``and``).
    if ROTATE and not WRITE_CACHE:  # noqa: SIM102
        if kv_part:
            _rotate(k_ptr, k_out_ptr, stride_kt, stride_kh, stride_kot, stride_koh, t, num_kv_heads, cos,
                    sin, k_norm_ptr, eps, HALF, KV_PAD, D_HALF, NORM)  # fmt: skip
    if WRITE_CACHE:  # noqa: SIM102
        if kv_part:
            slot = tl.load(slot_ptr + t)
            if slot >= 0:
                block = slot // block_size
                offset = slot % block_size
                _rotate(k_ptr, k_cache_ptr + block * stride_cb + offset * stride_cs, stride_kt, stride_kh,
                        0, stride_ch, t, num_kv_heads, cos, sin, k_norm_ptr, eps, HALF, KV_PAD, D_HALF,
                        NORM)  # fmt: skip
                h = tl.arange(0, KV_PAD)
                d = tl.arange(0, 2 * D_HALF)
                mask = (h[:, None] < num_kv_heads) & (d[None, :] < 2 * HALF)
                v = tl.load(v_ptr + t * stride_vt + h[:, None] * stride_vh + d[None, :], mask=mask)
                dst = (
                    v_cache_ptr
                    + block * stride_vcb
                    + offset * stride_vcs
                    + h[:, None] * stride_vch
                    + d[None, :]
                )
                tl.store(dst, v, mask=mask)


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, inv_freq: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rope(q), rope(k)) as new tensors.

    positions: [num_tokens]; q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads,
    head_dim] (contiguous head_dim); inv_freq: [head_dim / 2] float32.
    """
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _launch(positions, q, k, k, inv_freq, q_out, k_out, None, None, positions, rotate=True)
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
) -> torch.Tensor:
    """The fused op: store rope(k) and v at their slots and return rope(q).

    v: [num_tokens, num_kv_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size,
    num_kv_heads, head_dim]; slot_mapping: [num_tokens] int64, negative = do not store.
    ``qk_norm`` = (q weight [head_dim], k weight [head_dim], eps): RMS-normalise every q and k
    head before rotating (Qwen3).
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
    )
    return q_out


def kv_write(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Store already-rotated k and v at their slots (the layer's half when RoPE ran before it)."""
    _launch(slot_mapping, k, k, v, slot_mapping, k, k, k_cache, v_cache, slot_mapping, rotate=False)


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
) -> None:
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError("rotary_kv needs a contiguous head_dim")
    kc = k_cache if k_cache is not None else q_out
    vc = v_cache if v_cache is not None else q_out
    write_cache = k_cache is not None
    cache_strides = (*kc.stride()[:3], *vc.stride()[:3]) if write_cache else (0,) * 6
    q_norm, k_norm, eps = qk_norm if qk_norm is not None else (inv_freq, inv_freq, 0.0)
    _rotary_kv_kernel[(num_tokens, 2 if rotate else 1)](
        q, k, v, positions, inv_freq, q_out, k_out, kc, vc, slot_mapping, q_norm, k_norm, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        *cache_strides,
        num_heads, k.shape[1], kc.shape[1] if write_cache else 1,
        HALF=head_dim // 2, H_PAD=triton.next_power_of_2(num_heads),
        KV_PAD=triton.next_power_of_2(k.shape[1]), D_HALF=triton.next_power_of_2(head_dim // 2),
        WRITE_CACHE=write_cache, ROTATE=rotate, NORM=qk_norm is not None, **pdl_launch(q),
    )  # fmt: skip
