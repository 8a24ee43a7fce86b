"""KV-free attention: causal attention over each sequence's own keys, nothing read from or written
to the paged cache.

Embedding requests are one forward over whole inputs; they never decode, so their keys and values
are used once and dropped. The batch is laid end to end like a step's (``query_starts``), and each
sequence attends only to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["DenseMetadata", "dense_attention"]


@dataclass(frozen=True, slots=True)
class DenseMetadata:
    host_query_starts: tuple[int, ...]
    """[num_seqs + 1] on the host: where each whole sequence starts in the batch, then its end."""

    @property
    def num_seqs(self) -> int:
        return len(self.host_query_starts) - 1


def dense_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    meta: DenseMetadata,
    *,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    # q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
    # -> [num_tokens, num_heads, head_dim]
    out = torch.empty_like(q)
    group = q.shape[1] // k.shape[1]
    starts = meta.host_query_starts
    for i in range(meta.num_seqs):
        s, e = starts[i], starts[i + 1]
        qi, ki, vi = (t[s:e].transpose(0, 1) for t in (q, k, v))  # [heads, n, head_dim]
        if group > 1:
            ki = ki.repeat_interleave(group, dim=0)
            vi = vi.repeat_interleave(group, dim=0)
        if sliding_window is None:
            o = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=scale)
        else:
            pos = torch.arange(e - s, device=q.device)
            allowed = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < sliding_window)
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=allowed, scale=scale)
        out[s:e] = o.transpose(0, 1)
    return out
