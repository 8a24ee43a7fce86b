"""Token embedding and LM head split over the vocabulary across tensor-parallel ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from engine.worker.distributed import tp_rank, tp_world_size

if TYPE_CHECKING:
    from engine.kernels.normed_gemv import PendingNorm, TokenEmbedding

__all__ = [
    "FUSE_FINAL_NORM",
    "GATHER_IN_FIRST_GEMV",
    "LM_HEAD_BLOCK_N",
    "LM_HEAD_WARPS",
    "ParallelLMHead",
    "VocabParallelEmbedding",
]

FUSE_FINAL_NORM = True
"""One row on CUDA on one rank: the model's final RMSNorm is computed inside the LM head's GEMV,
which writes float32 logits directly (``engine.kernels.normed_gemv``). Benchmarks flip it."""
LM_HEAD_BLOCK_N: int | None = 16
"""Vocabulary rows per program of the fused LM head (None: ``normed_gemv.BLOCK_N``): it is the one
large GEMV of a decode step (9,496 programs at Qwen3's 152k rows). On an H200 the bucket-1 graph
of Qwen3-0.6B took 663.6–665.6 µs with 16 against 666.9–667.5 with 32, interleaved in one call
(engine 1,512 against 1,507 tok/s); 64 was slower still."""
LM_HEAD_WARPS: int | None = 4
"""Warps per program of the fused LM head (None: ``normed_gemv.NUM_WARPS``). On an H200 the
bucket-1 graph of Qwen3-0.6B took 666.9 µs with 4 against 676.3 with 8 (the head alone: 72.65
against 72.75 µs; with fewer warps more of its programs fit beside the kernel ahead of it)."""
GATHER_IN_FIRST_GEMV = True
"""One token on CUDA on one rank: the first layer's fused norm + GEMV gathers the embedding row
itself (``forward_deferred``), instead of an embedding kernel and a norm kernel. Benchmarks flip it."""


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int) -> None:
        super().__init__()
        self.tp_rank = tp_rank()
        self.tp_size = tp_world_size()
        self.shard_size = -(-vocab_size // self.tp_size)
        self.vocab_start = self.tp_rank * self.shard_size
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.empty(self.shard_size, hidden), requires_grad=False)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        shard = loaded[self.vocab_start : self.vocab_start + self.shard_size]
        param.data.zero_()
        param.data[: shard.shape[0]].copy_(shard)

    def forward_deferred(self, token_ids: torch.Tensor) -> torch.Tensor | TokenEmbedding:
        """``forward``, except that one token on CUDA on one rank is left for the first layer's
        norm to gather (``engine.kernels.normed_gemv``; a norm too wide to fuse gathers it at once,
        ``RMSNorm.forward_first``)."""
        if GATHER_IN_FIRST_GEMV and self.tp_size == 1 and token_ids.is_cuda and token_ids.numel() == 1:
            from engine.kernels.normed_gemv import TokenEmbedding

            return TokenEmbedding(self.weight, token_ids.view(1))
        return self.forward(token_ids)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: [num_tokens] -> [num_tokens, hidden]
        if self.tp_size == 1:
            return F.embedding(token_ids, self.weight)
        local = token_ids - self.vocab_start
        mine = (local >= 0) & (local < self.shard_size)
        y = F.embedding(local.clamp(0, self.shard_size - 1), self.weight) * mine.unsqueeze(1)
        dist.all_reduce(y)
        return y


class ParallelLMHead(VocabParallelEmbedding):
    def forward(self, hidden: torch.Tensor | PendingNorm) -> torch.Tensor:
        # hidden: [num_seqs, hidden], or one row's final norm left to this GEMM -> logits:
        # [num_seqs, vocab_size] (float32 when the norm is fused, else hidden's dtype)
        if not isinstance(hidden, torch.Tensor):
            if self._fuses(hidden):
                from engine.kernels import normed_gemv

                return normed_gemv(
                    hidden,
                    self.weight,
                    out_dtype=torch.float32,
                    block_n=LM_HEAD_BLOCK_N,
                    num_warps=LM_HEAD_WARPS,
                )
            hidden = hidden.materialize()
        logits = F.linear(hidden, self.weight)
        if self.tp_size > 1:
            parts = [torch.empty_like(logits) for _ in range(self.tp_size)]
            dist.all_gather(parts, logits)
            logits = torch.cat(parts, dim=-1)
        return logits[:, : self.vocab_size]

    def _fuses(self, hidden: PendingNorm) -> bool:
        # One rank's whole vocabulary (tp 1: the shard is exactly the vocabulary).
        from engine.layers.linear import USE_SKINNY_GEMM

        return FUSE_FINAL_NORM and USE_SKINNY_GEMM and self.tp_size == 1 and hidden.fuses_into(self.weight)
