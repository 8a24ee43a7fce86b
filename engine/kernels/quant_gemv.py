# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""y = x @ dequantize(Wq, scale)^T (+ bias) for a few rows of x, with FP8 E4M3 or INT8 weights.

The decode GEMM streams its weight once, so storing it in one byte instead of two halves its
time. Each program owns ``block_n`` rows of Wq and walks all of K ``block_k`` columns at a time;
the quantized tile is converted to x's dtype (exact: E4M3 and int8 values are bf16/fp16 values),
multiplied on tensor cores with float32 accumulation, and the product scaled by the tile's
scale, one per output row and K group (``engine.quantization.tensors``)::

    Wq [N, K]        fp8 / int8      program j reads rows j*BN .. (j+1)*BN
    scale [N, G]     float32         G = 1 (per channel) or ceil(K / group); block_k divides group
    x [M <= 16, K]   bf16/fp16/fp32  padded to 16 rows for tl.dot

No split-K and no atomics: results are deterministic and the grid depends only on shapes, so
calls can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["QUANT_GEMV_MAX_ROWS", "quant_gemv", "quant_gemv_fits"]

QUANT_GEMV_MAX_ROWS = 16
_BLOCK_M = 16
_BLOCK_N = 32
_BLOCK_K = 128


@triton.jit
def _quant_gemv_kernel(
    x_ptr, w_ptr, s_ptr, b_ptr, y_ptr,
    m, n, k, group, stride_xm, stride_wn, stride_sn, stride_ym,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    n_ok = rn < n
    m_ok = rm < m
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < k
        x = tl.load(
            x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0
        )
        w_ok = n_ok[:, None] & k_ok[None, :]
        # No ``other``: the interpreter cannot fill an fp8 tile; masked lanes are zeroed after the cast.
        wq = tl.load(w_ptr + rn[:, None] * stride_wn + kk[None, :], mask=w_ok, eviction_policy="evict_first")
        w = tl.where(w_ok, wq.to(tl.float32), 0.0).to(x.dtype)
        s = tl.load(s_ptr + rn * stride_sn + k0 // group, mask=n_ok, other=0.0)
        if UPCAST:
            w, x = w.to(tl.float32), x.to(tl.float32)
        acc += tl.dot(w, tl.trans(x), input_precision=PRECISION) * s[:, None]  # [BN, BM]
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    y = y_ptr + rm[None, :] * stride_ym + rn[:, None]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=n_ok[:, None] & m_ok[None, :])


def quant_gemv_fits(x: torch.Tensor, group: int | None) -> bool:
    """Whether ``quant_gemv`` takes x (2-D, at most 16 rows) with scales of ``group`` columns."""
    return (
        x.dim() == 2
        and x.shape[0] <= QUANT_GEMV_MAX_ROWS
        and x.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and (group is None or group % _BLOCK_K == 0)
    )


def quant_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    group: int | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [m <= 16, K] @ dequantize(weight [N, K], scale [N, G])^T + bias -> [m, N] in x's dtype;
    ``group``: K columns per scale (None: one scale per row)."""
    if not quant_gemv_fits(x, group):
        raise ValueError(
            f"quant_gemv takes up to {QUANT_GEMV_MAX_ROWS} rows and groups of {_BLOCK_K}k columns"
        )
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k or scale.shape[0] != n or scale.dtype != torch.float32:
        raise ValueError(
            f"shapes do not fit: x {tuple(x.shape)}, weight {tuple(weight.shape)}, scale {tuple(scale.shape)}"
        )
    x = x.contiguous()
    interpreted = x.device.type == "cpu"  # only under TRITON_INTERPRET, whose numpy dot lacks bf16
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    _quant_gemv_kernel[(triton.cdiv(n, _BLOCK_N),)](
        x, weight, scale, bias, y,
        m, n, k, k if group is None else group, x.stride(0), weight.stride(0), scale.stride(0), y.stride(0),
        HAS_BIAS=bias is not None, PRECISION="ieee" if x.dtype == torch.float32 or interpreted else "tf32",
        UPCAST=interpreted,
        BLOCK_M=_BLOCK_M, BLOCK_N=_BLOCK_N, BLOCK_K=_BLOCK_K,
    )  # fmt: skip
    return y
