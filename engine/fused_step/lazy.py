"""The fused step's lazy activations: a value one kernel leaves for the next kernel to finish.

    SplitKPartials  a skinny GEMM's output before its split-K sum    summed by the next RMSNorm
    PendingMerge    attention's output before its split merge       merged by o_proj's GEMM
    PendingNorm     the residual add and RMSNorm of one row, not     computed by the GEMM after
                    yet computed (the first layer's gathers its      it (``normed_gemv``)
                    embedding row: ``TokenEmbedding``)

The kernels define them as their inputs and outputs (``engine.kernels``). The fused step passes
one only from its producer to its consumer; a consumer that cannot take it calls
``materialize``, the one place a lazy activation becomes a tensor, through the kernel the fusion
saves, so the bits are the same either way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels import (
    PendingMerge,
    PendingNorm,
    SplitKPartials,
    TokenEmbedding,
    rms_norm,
    rms_norm_split_k,
)
from engine.tuning import CudaTuning

__all__ = ["Activation", "Lazy", "materialize"]

Lazy = SplitKPartials | PendingMerge | PendingNorm
"""What a producer may hand its consumer instead of a tensor."""
Activation = torch.Tensor | Lazy


def materialize(x: torch.Tensor | PendingMerge | PendingNorm, tuning: CudaTuning) -> torch.Tensor:
    """x as a tensor: [num_tokens, width]. A ``PendingNorm`` also fills its ``residual_out``.

    (``SplitKPartials`` never needs this: its consumer, the norm, always sums them.)"""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, PendingMerge):
        t, h, _, d = x.partials.shape
        out = torch.empty(t, h, d, dtype=x.dtype, device=x.partials.device)
        return x.merge_into(out, tuning).flatten(1)
    row = F.embedding(x.x.token_ids, x.x.weight) if isinstance(x.x, TokenEmbedding) else x.x
    if isinstance(row, SplitKPartials):
        assert x.residual is not None  # partials are a layer's output, never the first input
        return rms_norm_split_k(row, x.weight, x.eps, x.residual, x.residual_out, tuning=tuning)[0]
    if x.residual is None:
        x.residual_out.copy_(row)
        return rms_norm(row, x.weight, x.eps, tuning=tuning)[0]
    return rms_norm(row, x.weight, x.eps, x.residual, x.residual_out, tuning=tuning)[0]
