"""The fused step's matmuls over the linear layers' weights: cuBLAS, or the skinny GEMM for few
rows, taking a lazy input into its loads where it can.

    input             consumer                    what runs
    PendingNorm       any GEMM                    normed_gemv: the norm, then one row of the GEMM
    PendingMerge      o_proj                      skinny_gemm (quant_gemv for an FP8 / INT8
                                                  weight of per-row scales) merging attention's
                                                  partials; up to CudaTuning.merge_max_k columns
    2-D, <= 16 rows   o_proj, down (one rank)     skinny_gemm_deferred: split-K partials left
                                                  to the next norm (SplitKPartials)
    [gate | up] row   down                        skinny_gemm with silu(gate) * up in its loads

A lazy input a GEMM cannot take is materialized first (``lazy.materialize``). Row-parallel
layers on more than one rank all-reduce a summed output, so only one rank leaves partials.

Quantized layers (``engine.layers.quantized_linear``) with one scale per output row take a
pending norm into ``normed_gemv`` and a pending merge into ``quant_gemv``'s one-row path, as
bf16 layers take them into ``normed_gemv`` and ``skinny_gemm``. Otherwise their input is
materialized, and decode batches (``CudaTuning.quant_gemv_max_rows``) run ``quant_gemv`` (the
weight read in its one byte; like the skinny GEMM it makes silu(gate) * up in its loads and
leaves split-K partials to the next norm on one rank); more rows run FP8 x FP8
``torch._scaled_mm`` for FP8 per-channel weights (activations quantized per row:
``engine.quantization.scaled_mm``), else dequantize the weight and run cuBLAS.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from engine.fused_step.lazy import materialize
from engine.kernels import (
    PendingMerge,
    PendingNorm,
    SplitKPartials,
    normed_gemv,
    skinny_gemm,
    skinny_gemm_deferred,
)
from engine.kernels.quant_gemv import quant_gemv, quant_gemv_deferred, quant_gemv_fits
from engine.kernels.silu_and_mul import silu_and_mul
from engine.layers import ColumnParallelLinear, RowParallelLinear
from engine.layers.quantized_linear import QuantizedLinear
from engine.quantization.scaled_mm import fp8_scaled_mm, fp8_scaled_mm_fits
from engine.tuning import CudaTuning

__all__ = [
    "SKINNY_GEMM_MAX_ROWS",
    "column",
    "fuses_into",
    "is_skinny",
    "row",
    "row_deferred",
    "silu_mul_down",
]

SKINNY_GEMM_MAX_ROWS = 16
"""Most rows the skinny GEMM takes (its configurations are swept for 1..16)."""


def is_skinny(x: torch.Tensor, tuning: CudaTuning) -> bool:
    """Whether a matmul of x (rows of its last dim) runs the skinny-GEMM kernel."""
    return (
        tuning.skinny_gemm
        and x.dtype in (torch.bfloat16, torch.float16)
        and x.numel() <= SKINNY_GEMM_MAX_ROWS * x.shape[-1]
    )


def column(layer: ColumnParallelLinear, x: torch.Tensor | PendingNorm, tuning: CudaTuning) -> torch.Tensor:
    # x: [num_tokens, in], or one row's norm left to this GEMM -> [num_tokens, out / tp]
    if isinstance(layer, QuantizedLinear):
        return _quantized_matmul(layer, x, layer.bias, tuning)
    return _matmul(x, layer.weight, layer.bias, tuning)


def row(layer: RowParallelLinear, x: torch.Tensor | PendingMerge, tuning: CudaTuning) -> torch.Tensor:
    # x: [num_tokens, in / tp], or one token's attention partials -> [num_tokens, out]
    bias = layer.bias if layer.tp_rank == 0 else None
    if isinstance(layer, QuantizedLinear):
        y = _quantized_matmul(layer, x, bias, tuning)
    else:
        y = _matmul(x, layer.weight, bias, tuning)
    if layer.tp_size > 1:
        dist.all_reduce(y, group=layer.tp_group)
    return y


def row_deferred(
    layer: RowParallelLinear, x: torch.Tensor | PendingMerge, tuning: CudaTuning
) -> torch.Tensor | SplitKPartials:
    """``row``, or, for a skinny 2-D x on one rank, possibly the GEMM's split-K partials for the
    next norm to sum. x may be attention's unmerged partials (o_proj at one decode token)."""
    if isinstance(layer, QuantizedLinear):
        if isinstance(x, PendingMerge) and not _quant_merges(layer, x, tuning):
            x = materialize(x, tuning)  # merged by its own kernel, as below for bf16
        if layer.tp_size == 1 and (isinstance(x, PendingMerge) or _quant_skinny(layer, x, tuning)):
            return quant_gemv_deferred(
                x, layer.weight, layer.weight_scale, layer.group, layer.bias, tuning=tuning
            )
        return row(layer, x, tuning)
    if isinstance(x, PendingMerge) and not fuses_into(x, layer.weight, tuning):
        x = materialize(x, tuning)  # merged by its own kernel; the tensor rule below still defers the sum
    if not _defers(layer, x, tuning):
        return row(layer, x, tuning)
    return skinny_gemm_deferred(x, layer.weight, layer.bias, tuning=tuning)


def silu_mul_down(
    layer: RowParallelLinear, gate_up: torch.Tensor, tuning: CudaTuning
) -> torch.Tensor | SplitKPartials:
    """``row(layer, silu(gate) * up)`` for a merged [gate | up] input that ``is_skinny``: the
    activation is made inside the GEMM's loads (one launch and one tensor fewer). Partials as
    ``row_deferred``."""
    if isinstance(layer, QuantizedLinear):
        if not _quant_skinny(layer, gate_up, tuning):
            return row(layer, silu_and_mul(gate_up, tuning=tuning), tuning)
        if layer.tp_size == 1:
            return quant_gemv_deferred(
                gate_up,
                layer.weight,
                layer.weight_scale,
                layer.group,
                layer.bias,
                silu_mul=True,
                tuning=tuning,
            )
        bias = layer.bias if layer.tp_rank == 0 else None
        y = quant_gemv(
            gate_up, layer.weight, layer.weight_scale, layer.group, bias, silu_mul=True, tuning=tuning
        )
        dist.all_reduce(y, group=layer.tp_group)
        return y
    if _defers(layer, gate_up, tuning):
        return skinny_gemm_deferred(gate_up, layer.weight, layer.bias, silu_mul=True, tuning=tuning)
    bias = layer.bias if layer.tp_rank == 0 else None
    y = skinny_gemm(gate_up, layer.weight, bias, silu_mul=True, tuning=tuning)
    if layer.tp_size > 1:
        dist.all_reduce(y, group=layer.tp_group)
    return y


def fuses_into(
    x: PendingNorm | PendingMerge, weight: torch.Tensor, tuning: CudaTuning, *, quantized: bool = False
) -> bool:
    """Whether the GEMM with ``weight`` takes the pending norm or merge into its own loads;
    ``quantized``: an FP8 / INT8 weight with per-row scales (``normed_gemv``, ``quant_gemv``)."""
    if isinstance(x, PendingMerge) and weight.shape[1] > tuning.merge_max_k:
        return False
    return tuning.skinny_gemm and x.fuses_into(weight, quantized=quantized)


def _defers(layer: RowParallelLinear, x: torch.Tensor | PendingMerge, tuning: CudaTuning) -> bool:
    # All-reduce needs the summed output, so only a single rank defers. Partials reach here
    # only when this GEMM merges them (row_deferred materializes the others).
    if layer.tp_size != 1:
        return False
    return not isinstance(x, torch.Tensor) or (x.dim() == 2 and is_skinny(x, tuning))


def _matmul(
    x: torch.Tensor | PendingNorm | PendingMerge,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tuning: CudaTuning,
) -> torch.Tensor:
    # x: [num_tokens, in] -> [num_tokens, out]
    if not isinstance(x, torch.Tensor):
        if fuses_into(x, weight, tuning):
            if isinstance(x, PendingMerge):
                return skinny_gemm(x, weight, bias, tuning=tuning)
            return normed_gemv(x, weight, bias, tuning=tuning)
        x = materialize(x, tuning)
    if is_skinny(x, tuning):
        return skinny_gemm(x, weight, bias, tuning=tuning)
    return F.linear(x, weight, bias)


def _quantized_matmul(
    layer: QuantizedLinear,
    x: torch.Tensor | PendingNorm | PendingMerge,
    bias: torch.Tensor | None,
    tuning: CudaTuning,
) -> torch.Tensor:
    # x: [num_tokens, in] -> [num_tokens, out]
    if (
        isinstance(x, PendingNorm)
        and layer.group is None
        and fuses_into(x, layer.weight, tuning, quantized=True)
    ):
        return normed_gemv(x, layer.weight, bias, scale=layer.weight_scale, tuning=tuning)
    if isinstance(x, PendingMerge) and _quant_merges(layer, x, tuning):
        return quant_gemv(x, layer.weight, layer.weight_scale, None, bias, tuning=tuning)
    if not isinstance(x, torch.Tensor):
        x = materialize(x, tuning)
    if _quant_skinny(layer, x, tuning):
        return quant_gemv(x, layer.weight, layer.weight_scale, layer.group, bias, tuning=tuning)
    if tuning.fp8_scaled_mm and fp8_scaled_mm_fits(x, layer.weight, layer.group):
        return fp8_scaled_mm(x, layer.weight, layer.weight_scale, bias)
    return F.linear(x, layer.dequantized(x.dtype), bias)


def _quant_merges(layer: QuantizedLinear, x: PendingMerge, tuning: CudaTuning) -> bool:
    # Whether quant_gemv merges the quantized layer's pending attention partials in its loads:
    # per-row scales, and one row within the rows quant_gemv takes.
    return (
        layer.group is None
        and tuning.quant_gemv_max_rows >= 1
        and fuses_into(x, layer.weight, tuning, quantized=True)
    )


def _quant_skinny(layer: QuantizedLinear, x: torch.Tensor, tuning: CudaTuning) -> bool:
    # Whether the quantized layer's matmul of 2-D x runs quant_gemv.
    return (
        tuning.skinny_gemm
        and x.dim() == 2
        and x.shape[0] <= tuning.quant_gemv_max_rows
        and quant_gemv_fits(x, layer.group)
    )
