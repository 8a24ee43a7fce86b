"""Paged attention on CUDA: the Triton kernel behind the same ``forward`` as the torch backend."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from engine.attention.metadata import AttentionMetadata

if TYPE_CHECKING:
    from engine.kernels.paged_attention import NewTokenRope
    from engine.kernels.split_merge import PendingMerge

__all__ = ["TritonPagedAttention"]

_TARGET_PROGRAMS = 1024
"""About eight programs per H200 multiprocessor: split decode keys until a step has this many.
With 264, the throughput workload's 48-sequence steps ran attention at ~0.64 of the copy ceiling
(H200 run 4); the sweep of run 5 finds no split count best at every shape (bench.attention_sweep)."""
_MAX_SPLITS = 16
SMALL_BATCH_MAX_SPLITS = 16
"""The cap under 16 sequences, where a step is latency-bound (benchmarks sweep it)."""


def num_splits_for(num_seqs: int, num_kv_heads: int, max_query_len: int) -> int:
    """Split-K factor, a power of two that depends only on the batch shape (graph-safe)."""
    if max_query_len > 1:
        return 1
    splits = 1
    cap = _MAX_SPLITS if num_seqs >= 16 else SMALL_BATCH_MAX_SPLITS
    while splits < cap and num_seqs * num_kv_heads * splits < _TARGET_PROGRAMS:
        splits *= 2
    return splits


class TritonPagedAttention:
    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        *,
        scale: float,
        sliding_window: int | None = None,
    ) -> torch.Tensor:
        # q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
        from engine.kernels import paged_attention

        starts = meta.host_query_starts
        max_query_len = max(b - a for a, b in itertools.pairwise(starts))
        return paged_attention(
            q,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.context_lens,
            meta.query_starts,
            max_query_len=max_query_len,
            scale=scale,
            sliding_window=sliding_window,
            num_splits=num_splits_for(meta.num_seqs, k_cache.shape[2], max_query_len),
        )

    def forward_decode(
        self,
        q: torch.Tensor,
        new: NewTokenRope,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        *,
        scale: float,
        sliding_window: int | None = None,
        defer_merge: bool = False,
    ) -> torch.Tensor | PendingMerge:
        """A decode step with its RoPE and KV write inside the kernel (``decode_attention``)."""
        from engine.kernels import decode_attention

        return decode_attention(
            q,
            new,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.context_lens,
            meta.query_starts,
            scale=scale,
            sliding_window=sliding_window,
            num_splits=num_splits_for(meta.num_seqs, k_cache.shape[2], 1),
            defer_merge=defer_merge,
        )
