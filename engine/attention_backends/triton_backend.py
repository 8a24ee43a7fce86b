"""Paged attention on CUDA: the Triton kernels behind the torch backend's ``store_kv``/``forward``,
plus the fused step's ``forward_rope`` (RoPE and the cache write folded into attention's launches).

Kernels are imported when a method runs, never at import (``engine.kernels``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from engine.attention_backends.metadata import AttentionMetadata
from engine.tuning import DEFAULT_TUNING, CudaTuning

if TYPE_CHECKING:
    from engine.kernels.split_merge import PendingMerge

__all__ = ["TritonAttentionBackend", "num_splits_for"]

_TARGET_PROGRAMS = 1024
"""About eight programs per H200 multiprocessor: split decode keys until a step has this many
(no split count is best at every shape: bench.attention_sweep)."""
_MAX_SPLITS = 16


def num_splits_for(
    num_seqs: int, num_kv_heads: int, max_query_len: int, small_batch_max_splits: int = _MAX_SPLITS
) -> int:
    """Split-K factor, a power of two that depends only on the batch shape (graph-safe).
    ``small_batch_max_splits`` caps it under 16 sequences (``CudaTuning.small_batch_max_splits``)."""
    if max_query_len > 1:
        return 1
    splits = 1
    cap = _MAX_SPLITS if num_seqs >= 16 else small_batch_max_splits
    while splits < cap and num_seqs * num_kv_heads * splits < _TARGET_PROGRAMS:
        splits *= 2
    return splits


class TritonAttentionBackend:
    def __init__(self, tuning: CudaTuning = DEFAULT_TUNING) -> None:
        self.tuning = tuning

    def store_kv(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> None:
        # k, v: [num_tokens, num_kv_heads, head_dim] -> their slots of the paged cache
        from engine.kernels import kv_write

        kv_write(k, v, k_cache, v_cache, meta.slot_mapping, tuning=self.tuning)

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
            num_splits=self._num_splits(meta, k_cache, max_query_len),
            tuning=self.tuning,
        )

    def forward_rope(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        *,
        inv_freq: torch.Tensor,
        qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None,
        scale: float,
        sliding_window: int | None = None,
        defer_merge: bool = False,
    ) -> torch.Tensor | PendingMerge:
        """[q/k head norm,] RoPE, the cache write and attention, for un-rotated q, k, v.

        A decode step of at most ``rope_in_attention_max_seqs`` sequences does all of it in the
        attention kernel (``decode_attention``); any other step rotates and stores in one launch
        (``rotary_kv_write``), then attends. ``qk_norm`` = (q weight, k weight, eps) of a per-head
        RMSNorm (Qwen3). Returns [num_tokens, num_heads, head_dim]; with ``defer_merge``, a
        decode step whose attention splits its keys returns its unmerged ``PendingMerge``.
        """
        from engine.kernels import NewTokenRope, decode_attention, rotary_kv_write

        head_dim = q.shape[2]
        if (
            meta.num_seqs <= self.tuning.rope_in_attention_max_seqs
            and all(b - a == 1 for a, b in itertools.pairwise(meta.host_query_starts))
            and head_dim & (head_dim - 1) == 0
        ):
            new = NewTokenRope(k, v, positions, meta.slot_mapping, inv_freq, qk_norm)
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
                num_splits=self._num_splits(meta, k_cache, 1),
                defer_merge=defer_merge,
                tuning=self.tuning,
            )
        q = rotary_kv_write(
            positions,
            q,
            k,
            v,
            inv_freq,
            k_cache,
            v_cache,
            meta.slot_mapping,
            qk_norm=qk_norm,
            tuning=self.tuning,
        )
        return self.forward(q, k_cache, v_cache, meta, scale=scale, sliding_window=sliding_window)

    def _num_splits(self, meta: AttentionMetadata, k_cache: torch.Tensor, max_query_len: int) -> int:
        return num_splits_for(
            meta.num_seqs, k_cache.shape[2], max_query_len, self.tuning.small_batch_max_splits
        )
