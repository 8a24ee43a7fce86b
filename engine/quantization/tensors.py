"""Quantize and dequantize weight matrices; dequantize-then-matmul is the reference forward.

A quantized weight ``q`` [out, in] (float8_e4m3fn or int8) has scales ``scale`` [out, groups]
in float32: ``w[n, k] ~= q[n, k] * scale[n, k // (in / groups)]`` with groups = 1 (one scale
per output channel) or ceil(in / block) (block scales, expanded along ``out`` to one row per
output channel so that every tensor-parallel slice of the rows is a slice of the scales too).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "FP8_MAX",
    "INT8_MAX",
    "dequantize",
    "expand_groups",
    "quantize",
    "quantize_blocks",
    "storage_dtype",
]

FP8_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448
INT8_MAX = 127.0
_STORAGE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}


def _cast(x: torch.Tensor, fmt: str) -> torch.Tensor:
    if fmt == "fp8":
        return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return x.round().clamp(-INT8_MAX - 1, INT8_MAX).to(torch.int8)


def quantize(w: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric quantization: (q [out, in], scale [out, 1] float32)."""
    w = w.float()
    qmax = FP8_MAX if fmt == "fp8" else INT8_MAX
    scale = (w.abs().amax(dim=1, keepdim=True) / qmax).clamp(min=1e-12)
    return _cast(w / scale, fmt), scale


def quantize_blocks(w: torch.Tensor, fmt: str, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Block quantization as FP8 checkpoints ship it: (q [out, in], scale [ceil(out/bn), ceil(in/bk)])."""
    bn, bk = block
    out, inp = w.shape
    rows, cols = math.ceil(out / bn), math.ceil(inp / bk)
    padded = torch.zeros(rows * bn, cols * bk, dtype=torch.float32, device=w.device)
    padded[:out, :inp] = w.float()
    tiles = padded.view(rows, bn, cols, bk)
    qmax = FP8_MAX if fmt == "fp8" else INT8_MAX
    scale = (tiles.abs().amax(dim=(1, 3)) / qmax).clamp(min=1e-12)  # [rows, cols]
    q = _cast(tiles / scale[:, None, :, None], fmt).view(rows * bn, cols * bk)[:out, :inp]
    return q.contiguous(), scale


def expand_groups(scale: torch.Tensor, inp: int, group: int | None) -> torch.Tensor:
    """scale [out, groups] -> [out, inp] (or [out, 1] per channel): each group of ``group``
    input columns gets its scale."""
    if group is None:
        return scale
    return scale.repeat_interleave(group, dim=1)[:, :inp]


def dequantize(
    q: torch.Tensor, scale: torch.Tensor, group: int | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """q [out, in], scale [out, groups] -> w [out, in] in ``dtype`` (computed in float32);
    ``group`` is the input columns per scale (None: one scale per output channel)."""
    return (q.float() * expand_groups(scale, q.shape[1], group)).to(dtype)


def storage_dtype(fmt: str) -> torch.dtype:
    return _STORAGE[fmt]
