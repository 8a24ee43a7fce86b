"""FP8 KV cache: keys and values stored as E4M3 with one scale per layer for K and one for V.

The paged pool (``engine.worker.kv_cache``) holds ``round_e4m3(k / k_scale)`` and
``round_e4m3(v / v_scale)``; attention reads them back as ``cache * scale``. Every kernel and
the torch path go through the same two steps, so the CPU reference and the Triton kernels store
the same bits::

    write:  c = e4m3(clamp(x * (1 / scale), -448, 448))   round to nearest even, saturating
    read:   x' = float(c) * scale                          exact widening, then the scale

The scale is fixed at 1.0 per layer (vLLM's default for an uncalibrated FP8 cache): a scale must
hold for the whole life of the cache, since a block written under one scale cannot be read under
another, and the keys and values of the Llama / Qwen families sit well inside E4M3's range
(±448, relative step 2^-4 above 2^-6) without one. A checkpoint that ships calibrated per-layer
scales (``self_attn.k_scale`` / ``v_scale``) gets those instead (``engine.loading.model_loader``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.quantization.tensors import FP8_MAX

__all__ = ["KV_CACHE_DTYPES", "UNIT_SCALES", "KVScales", "dequantize_kv", "kv_storage_dtype", "quantize_kv"]

KV_CACHE_DTYPES = ("auto", "fp8")
"""``kv_cache_dtype``: "auto" stores K/V in the model's dtype, "fp8" as float8_e4m3fn."""


@dataclass(frozen=True, slots=True)
class KVScales:
    """One layer's dequantization scales: the cache holds K / k and V / v."""

    k: float = 1.0
    v: float = 1.0

    def __post_init__(self) -> None:
        if not (self.k > 0 and self.v > 0):
            raise ValueError(f"KV scales must be positive, not {self.k}, {self.v}")


UNIT_SCALES = KVScales()
"""Scale 1.0 for K and V: what every layer's FP8 cache uses (see the module docstring)."""


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The element type of a model's paged K/V."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype == "fp8":
        return torch.float8_e4m3fn
    raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, not {kv_cache_dtype!r}")


def quantize_kv(x: torch.Tensor, scale: float) -> torch.Tensor:
    """x (any float dtype) -> float8_e4m3fn holding x / scale, saturated at ±448."""
    return (x.float() * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def dequantize_kv(c: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """float8 cache entries -> their values in ``dtype``; other dtypes pass through."""
    if c.dtype != torch.float8_e4m3fn:
        return c
    return (c.float() * scale).to(dtype)
