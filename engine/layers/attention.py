"""The attention layer: store this step's K/V into the paged cache, then attend through a backend.

The backend follows the cache's device: Triton kernels on CUDA, plain torch elsewhere.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_paged import TorchPagedAttention
from engine.attention.triton_paged import TritonPagedAttention

if TYPE_CHECKING:
    from engine.kernels.split_merge import PendingMerge

__all__ = ["FUSED_DECODE_MAX_SEQS", "Attention"]

FUSED_DECODE_MAX_SEQS = 15
"""Decode steps of at most this many sequences on CUDA run RoPE and the cache write inside the
attention kernel (``decode_attention``): at small batches a step is a chain of latency-bound
launches, and this takes one out of every layer. 0 turns it off (benchmarks flip it)."""


class Attention(nn.Module):
    """Holds this layer's views of the shared KV pool once the runner binds them."""

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        scale: float,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.sliding_window = sliding_window
        self.backend: TorchPagedAttention | TritonPagedAttention = TorchPagedAttention()
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def bind_cache(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        # k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim] views of the shared pool
        self.k_cache, self.v_cache = k_cache, v_cache
        self.backend = TritonPagedAttention() if k_cache.is_cuda else TorchPagedAttention()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        # q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
        if self.k_cache.is_cuda:
            from engine.kernels import kv_write

            kv_write(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        else:
            self.write_cache_torch(k, v, meta)
        return self.backend.forward(
            q, self.k_cache, self.v_cache, meta, scale=self.scale, sliding_window=self.sliding_window
        )

    def forward_fused(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        meta: AttentionMetadata,
        inv_freq: torch.Tensor,
        qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None = None,
    ) -> torch.Tensor | PendingMerge:
        """CUDA only: [q/k head norm,] RoPE and the cache write in one launch, then attention;
        for a small decode batch, all of it in the attention kernel.

        q, k, v are un-rotated; ``qk_norm`` = (q weight, k weight, eps) for per-head RMSNorm.
        Returns [num_tokens, num_heads, head_dim]; or, for one decode token whose attention
        splits its keys, the ``PendingMerge`` of its partials, for o_proj to merge
        (``engine.kernels.split_merge``).
        """
        from engine.kernels import NewTokenRope, rotary_kv_write, split_merge

        if (
            isinstance(self.backend, TritonPagedAttention)
            and meta.num_seqs <= FUSED_DECODE_MAX_SEQS
            and all(b - a == 1 for a, b in itertools.pairwise(meta.host_query_starts))
            and self.head_dim & (self.head_dim - 1) == 0
        ):
            new = NewTokenRope(k, v, positions, meta.slot_mapping, inv_freq, qk_norm)
            return self.backend.forward_decode(
                q,
                new,
                self.k_cache,
                self.v_cache,
                meta,
                scale=self.scale,
                sliding_window=self.sliding_window,
                defer_merge=split_merge.FUSE_INTO_GEMM and meta.num_seqs == 1,
            )

        q = rotary_kv_write(
            positions, q, k, v, inv_freq, self.k_cache, self.v_cache, meta.slot_mapping, qk_norm=qk_norm
        )
        return self.backend.forward(
            q, self.k_cache, self.v_cache, meta, scale=self.scale, sliding_window=self.sliding_window
        )

    def write_cache_torch(self, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
        blocks = meta.slot_mapping // meta.block_size
        offsets = meta.slot_mapping % meta.block_size
        self.k_cache[blocks, offsets] = k
        self.v_cache[blocks, offsets] = v
