"""Token embedding and LM head split over the vocabulary across tensor-parallel ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from engine.worker.distributed import tp_group, tp_rank, tp_world_size

__all__ = ["ParallelLMHead", "VocabParallelEmbedding"]


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int) -> None:
        super().__init__()
        self.tp_rank = tp_rank()
        self.tp_size = tp_world_size()
        self.tp_group = tp_group()
        self.shard_size = -(-vocab_size // self.tp_size)
        self.vocab_start = self.tp_rank * self.shard_size
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.empty(self.shard_size, hidden), requires_grad=False)

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        """The vocabulary rows ``weight_loader`` takes (None: all, on one rank or past the end)."""
        stop = min(self.vocab_start + self.shard_size, self.vocab_size)
        return None if self.tp_size == 1 or self.vocab_start >= stop else (self.vocab_start, stop)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        shard = loaded[self.vocab_start : self.vocab_start + self.shard_size]
        param.data.zero_()
        param.data[: shard.shape[0]].copy_(shard)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: [num_tokens] -> [num_tokens, hidden]
        if self.tp_size == 1:
            return F.embedding(token_ids, self.weight)
        local = token_ids - self.vocab_start
        mine = (local >= 0) & (local < self.shard_size)
        y = F.embedding(local.clamp(0, self.shard_size - 1), self.weight) * mine.unsqueeze(1)
        dist.all_reduce(y, group=self.tp_group)
        return y


class ParallelLMHead(VocabParallelEmbedding):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [num_seqs, hidden] -> logits: [num_seqs, vocab_size] in hidden's dtype
        logits = F.linear(hidden, self.weight)
        if self.tp_size > 1:
            parts = [torch.empty_like(logits) for _ in range(self.tp_size)]
            dist.all_gather(parts, logits, group=self.tp_group)
            logits = torch.cat(parts, dim=-1)
        return logits[:, : self.vocab_size]
