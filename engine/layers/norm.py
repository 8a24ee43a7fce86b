"""RMSNorm computed in float32 and cast back, exactly as Hugging Face Llama/Qwen do.

On CUDA the Triton kernel (``engine.kernels.rms_norm``) runs instead, rounding at the same places,
with the decoder's residual add fused in (``forward_with_residual``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from engine.kernels.normed_gemv import PendingNorm, TokenEmbedding
    from engine.kernels.skinny_gemm import SplitKPartials

__all__ = ["DEFER_TO_GEMV", "RMSNorm"]

DEFER_TO_GEMV = True
"""One row on CUDA (batch-1 decode): ``forward_with_residual(..., defer=True)`` leaves the norm to
the GEMM that consumes it (``engine.kernels.normed_gemv``). Benchmarks flip it."""


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

    def forward_first(
        self, x: torch.Tensor | TokenEmbedding
    ) -> tuple[torch.Tensor | PendingNorm, torch.Tensor]:
        """(norm(x), x) for the first layer's input. One token's embedding not gathered yet (one
        row on CUDA) comes back as a ``PendingNorm`` for the GEMM after it to gather and norm."""
        if isinstance(x, torch.Tensor):
            return self(x), x
        from engine.kernels.normed_gemv import MAX_K, PendingNorm

        if DEFER_TO_GEMV and x.weight.shape[1] <= MAX_K:
            out = torch.empty(1, x.weight.shape[1], dtype=x.weight.dtype, device=x.weight.device)
            return PendingNorm(x, None, self.weight, self.eps, out), out
        row = x.materialize()  # too wide to fuse (Llama-3-8B's 4,096): the embedding kernel
        return self(row), row

    def forward_with_residual(
        self, x: torch.Tensor | SplitKPartials, residual: torch.Tensor, *, defer: bool = False
    ) -> tuple[torch.Tensor | PendingNorm, torch.Tensor]:
        """(norm(x + residual), x + residual): the decoder's residual add fused into its norm.

        x may be a skinny GEMM's split-K partials (decode on CUDA): their sum joins the fusion.
        With ``defer``, one row on CUDA: the norm comes back as a ``PendingNorm`` for the linear
        layer after it to compute (the returned sum is filled in by then).
        """
        if defer and DEFER_TO_GEMV and residual.is_cuda and residual.shape[0] == 1:
            from engine.kernels.normed_gemv import MAX_K, PendingNorm

            if residual.dim() == 2 and residual.shape[1] <= MAX_K and residual.is_contiguous():
                out = torch.empty_like(residual)
                return PendingNorm(x, residual, self.weight, self.eps, out), out
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
