"""RMSNorm computed in float32 and cast back, exactly as Hugging Face Llama/Qwen do.

On CUDA the Triton kernel (``engine.kernels.rms_norm``) runs instead, rounding at the same places,
with the decoder's residual add fused in (``forward_with_residual``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from engine.kernels.skinny_gemm import SplitKPartials

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., size]
        if x.is_cuda:
            from engine.kernels import rms_norm

            return rms_norm(x, self.weight, self.eps)[0]
        return self.forward_torch(x)

    def forward_with_residual(
        self, x: torch.Tensor | SplitKPartials, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual): the decoder's residual add fused into its norm.

        x may be a skinny GEMM's split-K partials (decode on CUDA): their sum joins the fusion.
        """
        if not isinstance(x, torch.Tensor):
            from engine.kernels import rms_norm_split_k

            return rms_norm_split_k(x, self.weight, self.eps, residual)
        if x.is_cuda:
            from engine.kernels import rms_norm

            normed, summed = rms_norm(x, self.weight, self.eps, residual)
            assert summed is not None  # rms_norm returns the sum whenever it is given a residual
            return normed, summed
        summed = x + residual
        return self.forward_torch(summed), summed

    def forward_torch(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)
