"""The attention layer: store this step's K/V into the paged cache, then attend through a backend.

A batch described by ``DenseMetadata`` (embedding requests) skips the cache altogether: each
sequence attends causally to its own keys (``engine.attention_backends.dense``).

The layer holds its views of the shared KV pool and its head geometry; the backend
(``engine.attention_backends``) does the reading and writing: plain torch on CPU, Triton kernels
on CUDA, chosen by the cache's device when the runner binds it.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.attention_backends.dense import DenseMetadata, dense_attention
from engine.attention_backends.metadata import AttentionMetadata
from engine.attention_backends.torch_backend import TorchAttentionBackend
from engine.attention_backends.triton_backend import TritonAttentionBackend
from engine.quantization.kv_quant import UNIT_SCALES, KVScales

__all__ = ["Attention"]


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
        self.backend: TorchAttentionBackend | TritonAttentionBackend = TorchAttentionBackend()
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)
        self.kv_scales: KVScales = UNIT_SCALES
        """What an FP8 cache's entries are multiplied by (``engine.quantization.kv_quant``): 1.0,
        or the checkpoint's calibrated scales (``engine.loading.model_loader``)."""

    def bind_cache(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        # k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim] views of the shared pool,
        # in the model's dtype or float8_e4m3fn (entries times ``kv_scales``)
        self.k_cache, self.v_cache = k_cache, v_cache
        self.backend = TritonAttentionBackend() if k_cache.is_cuda else TorchAttentionBackend()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata | DenseMetadata
    ) -> torch.Tensor:
        # q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
        # -> [num_tokens, num_heads, head_dim]
        if isinstance(meta, DenseMetadata):
            return dense_attention(q, k, v, meta, scale=self.scale, sliding_window=self.sliding_window)
        self.backend.store_kv(k, v, self.k_cache, self.v_cache, meta, self.kv_scales)
        return self.backend.forward(
            q,
            self.k_cache,
            self.v_cache,
            meta,
            scale=self.scale,
            sliding_window=self.sliding_window,
            scales=self.kv_scales,
        )
