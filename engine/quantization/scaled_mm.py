"""FP8 weights times FP8-quantized activations on the tensor cores (``torch._scaled_mm``).

For many rows (prefill, large decode batches) the matmul is compute-bound, and dequantizing the
weight first would cost a bf16 copy of it per call. Instead the activations are quantized to E4M3
per row (dynamic, amax / 448) and the FP8 x FP8 product is scaled by the row's and the output
channel's scale: ``y = (xq @ wq^T) * sx[m] * sw[n] + bias``. This is W8A8, so it rounds more than
the weight-only reference (``tensors.dequantize``) — by about one E4M3 step of each activation.
"""

from __future__ import annotations

import torch

from engine.quantization.tensors import FP8_MAX

__all__ = ["fp8_scaled_mm", "fp8_scaled_mm_fits"]


def fp8_scaled_mm_fits(x: torch.Tensor, weight: torch.Tensor, group: int | None) -> bool:
    """Whether ``fp8_scaled_mm`` takes x [m, K] with an FP8 per-channel weight [N, K]."""
    return (
        weight.dtype == torch.float8_e4m3fn
        and group is None
        and x.dim() == 2
        and x.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and x.shape[1] % 16 == 0
        and weight.shape[0] % 16 == 0
    )


def fp8_scaled_mm(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x [m, K] @ (weight [N, K] * scale [N, 1])^T + bias -> [m, N] in x's dtype, activations
    quantized per row to E4M3."""
    sx = (x.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)  # [m, 1]
    xq = (x.float() / sx).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    # Row-wise scales take a bfloat16 output only (cuBLASLt on Hopper); other dtypes convert after.
    y = torch._scaled_mm(xq, weight.t(), scale_a=sx, scale_b=scale.reshape(1, -1), out_dtype=torch.bfloat16)
    y = y.to(x.dtype)
    return y if bias is None else y + bias
