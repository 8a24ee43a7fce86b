# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""RMSNorm in Triton, optionally fused with the residual add before it, rounding as HF does.

HF computes ``weight * (x.float() * rsqrt(mean(x²) + eps)).to(dtype)``: normalise in float32,
round to the activations' dtype, then multiply by the weight with one more rounding. The kernel
rounds at the same two places, so bf16/fp16 outputs agree with the torch layer to the last bit
wherever float32 ``rsqrt`` does. With a residual, ``x + residual`` is rounded to the dtype first
(as the torch ``+`` would) and also returned: it is the next layer's residual stream.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.kernels.skinny_gemm import SplitKPartials, add_splits
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["rms_norm", "rms_norm_split_k"]


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, bias_ptr,
    inner, stride_x0, stride_x1, stride_r0, stride_r1, n_cols, eps, stride_part, num_parts,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, PARTS: tl.constexpr, HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    i0, i1 = row // inner, row % inner
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # a weight: before the wait
    pdl_wait(PDL)
    if PARTS > 0:
        # x is a split-K GEMM's float32 partials [num_parts, rows, n]: summed as _split_sum_kernel
        # sums them (the same order), plus the bias, rounded to the residual's dtype.
        acc = add_splits(x_ptr + i0 * stride_x0, cols, mask, num_parts, stride_part, PARTS)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        x = acc.to(res_ptr.dtype.element_ty)
    else:
        x = tl.load(x_ptr + i0 * stride_x0 + i1 * stride_x1 + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + i0 * stride_r0 + i1 * stride_r1 + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(res_out_ptr + row * n_cols + cols, x, mask=mask)
    h = x.to(tl.float32)
    h = h * tl.rsqrt(tl.sum(h * h, 0) / n_cols + eps)
    out = h.to(x.dtype).to(tl.float32) * w
    tl.store(out_ptr + row * n_cols + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> tuple[int, int, int, int]:
    """(num rows, inner, stride0, stride1) for a [..., n] tensor whose last dim is contiguous."""
    if x.dim() == 2:
        return x.shape[0], 1, x.stride(0), 0
    if x.dim() == 3:
        return x.shape[0] * x.shape[1], x.shape[1], x.stride(0), x.stride(1)
    flat = x.reshape(-1, x.shape[-1])
    return flat.shape[0], 1, flat.stride(0), 0


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    *,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x, residual: [..., n] (2-D or 3-D with a contiguous last dim); weight: [n].

    Returns (normed, x + residual) — the second is None without a residual — both contiguous,
    in x's shape and dtype; the sum is written to ``residual_out`` when given (x's shape, contiguous).
    """
    if x.stride(-1) != 1 or (residual is not None and residual.stride(-1) != 1):
        x = x.contiguous()
    if x.dim() not in (2, 3):
        x = x.reshape(-1, x.shape[-1])
    n = x.shape[-1]
    num_rows, inner, s0, s1 = _rows(x)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    res_out = None
    if residual is not None:
        res_out = residual_out.view(x.shape) if residual_out is not None else torch.empty_like(x)
    res = residual.reshape(x.shape) if residual is not None else x
    r0, r1 = (_rows(res)[2:]) if residual is not None else (0, 0)
    if num_rows == 0:
        return out, res_out
    _rms_norm_kernel[(num_rows,)](
        x, res, weight, out, res_out if res_out is not None else out, weight,
        inner, s0, s1, r0, r1, n, eps, 0, 0,
        HAS_RESIDUAL=residual is not None, BLOCK_N=triton.next_power_of_2(n), PARTS=0, HAS_BIAS=False,
        **pdl_launch(x, tuning.pdl),
    )  # fmt: skip
    return out, res_out


def rms_norm_split_k(
    x: SplitKPartials,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor,
    residual_out: torch.Tensor | None = None,
    *,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rms_norm(y, weight, eps, residual)`` for y still in split-K partials (one launch for the
    GEMM's split sum, the residual add and the norm). residual: [m, n], y's dtype. The sum goes to
    ``residual_out`` when given ([m, n] contiguous)."""
    parts = x.partials
    num_parts, m, n = parts.shape
    if residual.shape != (m, n) or residual.dtype != x.dtype or residual.stride(-1) != 1:
        raise ValueError(
            f"residual {tuple(residual.shape)} {residual.dtype} does not fit y {(m, n)} {x.dtype}"
        )
    out = torch.empty(m, n, dtype=torch.promote_types(x.dtype, weight.dtype), device=parts.device)
    res_out = (
        residual_out if residual_out is not None else torch.empty(m, n, dtype=x.dtype, device=parts.device)
    )
    if m == 0:
        return out, res_out
    _rms_norm_kernel[(m,)](
        parts, residual, weight, out, res_out, x.bias if x.bias is not None else weight,
        1, parts.stride(1), 0, residual.stride(0), 0, n, eps, parts.stride(0), num_parts,
        HAS_RESIDUAL=True, BLOCK_N=triton.next_power_of_2(n), PARTS=triton.next_power_of_2(num_parts),
        HAS_BIAS=x.bias is not None, **pdl_launch(parts, tuning.pdl),
    )  # fmt: skip
    return out, res_out
