"""The one KV memory pool per device, shared by every hosted model.

The pool is a single byte buffer cut into ``num_blocks`` equal blocks. A block holds
``block_size`` tokens of K and V for *all layers* of whichever model owns it, so a block id is
fungible: any model can take any free block. Blocks are sized for the model with the largest
per-token footprint (rounded up to 256 bytes); a smaller model uses a prefix of each block::

    pool: uint8 [num_blocks, block_bytes]
    ┌──────────── block 0 ─────────────┬──────────── block 1 ─────────────┬─ ...
    │ model A: L_A x 2 x [B, H_A, D_A] │ model B: L_B x 2 x [B, H_B, D_B] │ pad │
    └──────────────────────────────────┴──────────────────────────────────┴─ ...

    inside one block, for the model that owns it (its KV dtype, row-major):
    [layer 0: K [B, H, D] | V [B, H, D]] [layer 1: K | V] ... [layer L-1: K | V] [unused tail]

With tensor parallelism H counts this rank's KV heads, with pipeline parallelism L this stage's
layers. Each model sees the pool as ``[num_blocks, L, 2, B, H, D]`` (a strided view, no copy); layer
``l`` gets ``k_cache = view[:, l, 0]`` of shape ``[num_blocks, B, H, D]`` with
``stride(0) = block_bytes / itemsize``, ``stride(1) = H * D``, ``stride(2) = D``, ``stride(3) = 1``
— the paged layout a Triton kernel indexes as ``base + block_id * stride(0) + slot * stride(1)``.
A token at position ``p`` of a sequence lives in block ``block_table[p // B]``, slot ``p % B``.

A model's KV dtype is its own dtype, or float8_e4m3fn with ``kv_cache_dtype = "fp8"``
(``engine.quantization.kv_quant``): one byte per element, so a block of the same tokens takes half
the bytes of bfloat16 and the same memory holds twice the blocks.

The price of fungibility: a model with a smaller footprint wastes the tail of each block it
holds. Hosting models of similar shape keeps that small; the win is that no memory sits idle
behind a static per-model split.
"""

from __future__ import annotations

import os

import torch

from engine.config import EngineConfig
from engine.errors import EngineConfigError
from engine.loading.hosted_model import HostedModel

__all__ = ["KVCache"]

_ALIGN = 256


class KVCache:
    """Owns the pool buffer and hands each model its per-layer views."""

    def __init__(self, num_blocks: int, block_bytes: int, block_size: int, device: torch.device) -> None:
        self.num_blocks = num_blocks
        self.block_bytes = block_bytes
        self.block_size = block_size
        self.buffer = torch.zeros(num_blocks, block_bytes, dtype=torch.uint8, device=device)

    @staticmethod
    def block_bytes_for(models: list[HostedModel], block_size: int) -> int:
        largest = max(m.kv_bytes_per_token for m in models) * block_size
        return -(-largest // _ALIGN) * _ALIGN

    @staticmethod
    def num_blocks_for(
        config: EngineConfig, models: list[HostedModel], block_bytes: int, device: torch.device
    ) -> int:
        """Blocks of this rank's pool: ``kv_cache_bytes`` worth, or a share of the free memory,
        never more than ``max_num_seqs`` full-length sequences need."""
        if config.kv_cache_bytes is not None:
            num_blocks = config.kv_cache_bytes // block_bytes
        else:
            longest = max(m.max_model_len for m in models)
            enough = config.seq_limit * -(-longest // config.block_size)
            free = int(KVCache.available_bytes(device) * config.kv_cache_fraction)
            num_blocks = min(enough, free // block_bytes)
        if num_blocks < 1:
            raise EngineConfigError(f"KV pool holds no block of {block_bytes} bytes; raise kv_cache_bytes")
        return num_blocks

    @staticmethod
    def available_bytes(device: torch.device) -> int:
        """Free device memory now (after weights): CUDA's free memory, or available RAM on CPU."""
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return int(free)
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

    def view_for(self, model: HostedModel) -> torch.Tensor:
        """The pool as ``[num_blocks, L, 2, block_size, H, D]`` in the model's KV dtype."""
        c = model.config
        used = model.kv_bytes_per_token * self.block_size
        typed = self.buffer[:, :used].view(model.cache_dtype)
        return typed.view(
            self.num_blocks, model.num_stage_layers, 2, self.block_size, model.num_local_kv_heads, c.head_dim
        )

    def bind(self, model: HostedModel) -> None:
        view = self.view_for(model)
        for layer, attn in enumerate(model.model.kv_layers()):  # type: ignore[operator]
            attn.bind_cache(view[:, layer, 0], view[:, layer, 1])
