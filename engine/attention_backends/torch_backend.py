"""Attention over gathered KV pages in plain torch: one sequence at a time, exact, slow.

An FP8 cache (``engine.quantization.kv_quant``) is written through ``quantize_kv`` and read back
through ``dequantize_kv``: the reference the Triton kernels' FP8 paths are checked against."""

from __future__ import annotations

import torch

from engine.attention_backends.metadata import AttentionMetadata
from engine.quantization.kv_quant import UNIT_SCALES, KVScales, dequantize_kv, quantize_kv

__all__ = ["TorchAttentionBackend"]


class TorchAttentionBackend:
    """Gathers each sequence's pages, then runs causal (optionally sliding-window) attention."""

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
        blocks = meta.slot_mapping // meta.block_size
        offsets = meta.slot_mapping % meta.block_size
        if k_cache.dtype == torch.float8_e4m3fn:
            k, v = quantize_kv(k, scales.k), quantize_kv(v, scales.v)
        k_cache[blocks, offsets] = k
        v_cache[blocks, offsets] = v

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
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        starts = meta.host_query_starts
        for i, ctx in enumerate(meta.host_context_lens):
            qs, qe = starts[i], starts[i + 1]
            num_blocks = -(-ctx // meta.block_size)
            blocks = meta.block_tables[i, :num_blocks].long()
            k = k_cache[blocks].flatten(0, 1)[:ctx]  # [ctx, num_kv_heads, head_dim]
            v = v_cache[blocks].flatten(0, 1)[:ctx]
            k, v = dequantize_kv(k, scales.k, q.dtype), dequantize_kv(v, scales.v, q.dtype)
            if group > 1:
                k = k.repeat_interleave(group, dim=1)
                v = v.repeat_interleave(group, dim=1)
            qi = q[qs:qe].transpose(0, 1)  # [num_heads, n, head_dim]
            scores = torch.matmul(qi, k.permute(1, 2, 0)) * scale  # [num_heads, n, ctx]
            q_pos = torch.arange(ctx - (qe - qs), ctx, device=q.device).unsqueeze(1)
            k_pos = torch.arange(ctx, device=q.device).unsqueeze(0)
            allowed = k_pos <= q_pos
            if sliding_window is not None:
                allowed &= q_pos - k_pos < sliding_window
            scores = scores.masked_fill(~allowed, float("-inf"))
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out[qs:qe] = torch.matmul(probs, v.transpose(0, 1)).transpose(0, 1)
        return out
