"""The fused step's RMSNorms over the norm layers' weights: the Triton kernel, the residual add
and a split-K sum folded in, or, for one row, left to the GEMM after it (``PendingNorm``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels import PendingNorm, SplitKPartials, TokenEmbedding, rms_norm, rms_norm_split_k
from engine.layers import RMSNorm, VocabParallelEmbedding
from engine.tuning import CudaTuning

__all__ = ["add_norm", "embed_norm", "norm"]


def norm(layer: RMSNorm, x: torch.Tensor, tuning: CudaTuning) -> torch.Tensor:
    # x: [..., size] -> norm(x)
    return rms_norm(x, layer.weight, layer.eps, tuning=tuning)[0]


def add_norm(
    layer: RMSNorm, x: torch.Tensor | SplitKPartials, residual: torch.Tensor, tuning: CudaTuning
) -> tuple[torch.Tensor | PendingNorm, torch.Tensor]:
    """(norm(x + residual), x + residual) in one launch; x may be a skinny GEMM's split-K partials,
    whose sum joins it. One row (``tuning.norm_in_gemv``, at most ``norm_in_gemv_max_k`` wide):
    the norm comes back pending, for the GEMM after it; the returned sum is filled in by whichever
    kernel computes the norm."""
    one_row = residual.dim() == 2 and residual.shape[0] == 1
    if (
        tuning.norm_in_gemv
        and one_row
        and residual.shape[1] <= tuning.norm_in_gemv_max_k
        and residual.is_contiguous()
    ):
        out = torch.empty_like(residual)
        return PendingNorm(x, residual, layer.weight, layer.eps, out), out
    if isinstance(x, SplitKPartials):
        return rms_norm_split_k(x, layer.weight, layer.eps, residual, tuning=tuning)
    normed, summed = rms_norm(x, layer.weight, layer.eps, residual, tuning=tuning)
    assert summed is not None  # rms_norm returns the sum whenever it is given a residual
    return normed, summed


def embed_norm(
    embedding: VocabParallelEmbedding, layer: RMSNorm, token_ids: torch.Tensor, tuning: CudaTuning
) -> tuple[torch.Tensor | PendingNorm, torch.Tensor]:
    """(norm(embedding(token_ids)), embedding(token_ids)): the first layer's input. One token on
    one rank (``tuning.gather_in_first_gemv``) comes back pending: the GEMM after it gathers the
    embedding row and norms it."""
    if tuning.gather_in_first_gemv and embedding.tp_size == 1 and token_ids.numel() == 1:
        token = TokenEmbedding(embedding.weight, token_ids.view(1))
        width = embedding.weight.shape[1]
        if tuning.norm_in_gemv and width <= tuning.norm_in_gemv_max_k:
            out = torch.empty(1, width, dtype=embedding.weight.dtype, device=embedding.weight.device)
            return PendingNorm(token, None, layer.weight, layer.eps, out), out
        x = F.embedding(token.token_ids, token.weight)  # wider than norm_in_gemv_max_k
    else:
        x = embedding(token_ids)
    return norm(layer, x, tuning), x
