"""Rotary position embedding (rotate-half form), with Llama 3 and linear frequency scaling.

Frequencies and angles are computed in float32 and cast to the activations' dtype, as Hugging
Face does, so float32 results match it to rounding.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = ["RotaryEmbedding"]


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any], device: torch.device | None
) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, scaling)
    elif rope_type == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    return inv_freq


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._args = (head_dim, theta, scaling or {})
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", _inv_freq(*self._args, None), persistent=False)

    def reset_buffers(self, device: torch.device) -> None:
        """Compute the frequencies again on ``device`` (a model built on the meta device has none)."""
        self.inv_freq = _inv_freq(*self._args, device)

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # positions: [num_tokens]; q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads, head_dim]
        freqs = positions.float().unsqueeze(1) * self.inv_freq.unsqueeze(0)  # [num_tokens, head_dim / 2]
        emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)  # [num_tokens, 1, head_dim]
        cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)
