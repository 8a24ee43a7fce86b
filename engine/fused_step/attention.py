"""The fused step's attention: [q/k head norm,] RoPE, the KV-cache write and paged attention in
as few launches as the batch allows.

    decode, <= rope_in_attention_max_seqs sequences   decode_attention: all of it in one kernel;
                                                      at one sequence its split partials may be
                                                      left to o_proj (PendingMerge)
    anything else                                     rotary_kv_write, then the backend's attention
"""

from __future__ import annotations

import itertools

import torch

from engine.attention_backends import AttentionMetadata, TritonAttentionBackend
from engine.kernels import NewTokenRope, PendingMerge, decode_attention, rotary_kv_write
from engine.layers import Attention

__all__ = ["rope_attention"]


def rope_attention(
    backend: TritonAttentionBackend,
    layer: Attention,
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    meta: AttentionMetadata,
    *,
    inv_freq: torch.Tensor,
    qk_norm: tuple[torch.Tensor, torch.Tensor, float] | None,
    defer_merge: bool,
) -> torch.Tensor | PendingMerge:
    """Attention of un-rotated q [num_tokens, num_heads, head_dim] and k, v [num_tokens,
    num_kv_heads, head_dim] over ``layer``'s cache, their K/V stored first. ``qk_norm`` = (q
    weight, k weight, eps) of a per-head RMSNorm (Qwen3). Returns [num_tokens, num_heads,
    head_dim]; with ``defer_merge``, a decode step whose attention splits its keys returns its
    unmerged ``PendingMerge``."""
    tuning, head_dim = backend.tuning, q.shape[2]
    if (
        meta.num_seqs <= tuning.rope_in_attention_max_seqs
        and all(b - a == 1 for a, b in itertools.pairwise(meta.host_query_starts))
        and head_dim & (head_dim - 1) == 0
    ):
        new = NewTokenRope(k, v, positions, meta.slot_mapping, inv_freq, qk_norm)
        return decode_attention(
            q, new, layer.k_cache, layer.v_cache, meta.block_tables, meta.context_lens, meta.query_starts,
            scale=layer.scale, sliding_window=layer.sliding_window,
            num_splits=backend.num_splits(meta, layer.k_cache, 1), defer_merge=defer_merge,
            scales=layer.kv_scales, tuning=tuning,
        )  # fmt: skip
    q = rotary_kv_write(
        positions,
        q,
        k,
        v,
        inv_freq,
        layer.k_cache,
        layer.v_cache,
        meta.slot_mapping,
        qk_norm=qk_norm,
        scales=layer.kv_scales,
        tuning=tuning,
    )
    return backend.forward(
        q,
        layer.k_cache,
        layer.v_cache,
        meta,
        scale=layer.scale,
        sliding_window=layer.sliding_window,
        scales=layer.kv_scales,
    )
