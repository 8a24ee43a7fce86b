"""KV-free attention equals the paged backend's over the same keys, causal and sliding-window."""

from __future__ import annotations

import pytest
import torch

from engine.attention_backends.dense import DenseMetadata, dense_attention
from engine.attention_backends.metadata import AttentionMetadata
from engine.attention_backends.torch_backend import TorchAttentionBackend


@pytest.mark.parametrize("sliding_window", [None, 3])
def test_dense_attention_matches_the_paged_backend(sliding_window: int | None) -> None:
    gen = torch.Generator().manual_seed(0)
    lengths, heads, kv_heads, dim, block = [5, 1, 9], 4, 2, 8, 4
    num_tokens = sum(lengths)
    q = torch.randn(num_tokens, heads, dim, generator=gen)
    k = torch.randn(num_tokens, kv_heads, dim, generator=gen)
    v = torch.randn(num_tokens, kv_heads, dim, generator=gen)
    starts = [0, 5, 6, 15]
    dense = dense_attention(
        q, k, v, DenseMetadata(tuple(starts)), scale=dim**-0.5, sliding_window=sliding_window
    )

    # The same sequences through the paged cache: each in blocks of its own, all from position 0.
    tables, slots, next_block = [], [], 0
    for n in lengths:
        blocks = list(range(next_block, next_block + -(-n // block)))
        next_block += len(blocks)
        tables.append(blocks + [0] * (3 - len(blocks)))
        slots += [blocks[p // block] * block + p % block for p in range(n)]
    k_cache = torch.zeros(next_block, block, kv_heads, dim)
    v_cache = torch.zeros_like(k_cache)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        block_tables=torch.tensor(tables, dtype=torch.int32),
        context_lens=torch.tensor(lengths, dtype=torch.int32),
        query_starts=torch.tensor(starts, dtype=torch.int32),
        block_size=block,
        host_query_starts=tuple(starts),
        host_context_lens=tuple(lengths),
    )
    backend = TorchAttentionBackend()
    backend.store_kv(k, v, k_cache, v_cache, meta)
    paged = backend.forward(q, k_cache, v_cache, meta, scale=dim**-0.5, sliding_window=sliding_window)
    torch.testing.assert_close(dense, paged, atol=1e-5, rtol=1e-5)
