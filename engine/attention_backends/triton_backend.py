"""Paged attention on CUDA: the Triton kernels behind the torch backend's ``store_kv``/``forward``.

Kernels are imported when a method runs, never at import (``engine.kernels``). The fused step
folds RoPE and the cache write into attention's launches (``engine.fused_step.attention``).
"""

from __future__ import annotations

import itertools

import torch

from engine.attention_backends.metadata import AttentionMetadata
from engine.quantization.kv_quant import UNIT_SCALES, KVScales
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["TritonAttentionBackend", "num_splits_for"]

_TARGET_PROGRAMS = 1024
"""About eight programs per H200 multiprocessor: split decode keys until a step has this many
(no split count is best at every shape: bench.engine.attention_sweep)."""
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
        scales: KVScales = UNIT_SCALES,
    ) -> None:
        # k, v: [num_tokens, num_kv_heads, head_dim] -> their slots of the paged cache
        from engine.kernels import kv_write

        kv_write(k, v, k_cache, v_cache, meta.slot_mapping, scales=scales, tuning=self.tuning)

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        *,
        scale: float,
        sliding_window: int | None = None,
        scales: KVScales = UNIT_SCALES,
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
            num_splits=self.num_splits(meta, k_cache, max_query_len),
            scales=scales,
            tuning=self.tuning,
        )

    def num_splits(self, meta: AttentionMetadata, k_cache: torch.Tensor, max_query_len: int) -> int:
        """How many splits of each sequence's keys a step of this shape takes (``num_splits_for``)."""
        return num_splits_for(
            meta.num_seqs, k_cache.shape[2], max_query_len, self.tuning.small_batch_max_splits
        )
