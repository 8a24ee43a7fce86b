"""Linear layers whose weights are stored quantized (FP8 E4M3 or INT8) with float32 scales.

Each is its tensor-parallel twin in ``engine.layers.linear`` with ``weight`` in the storage dtype
and a ``weight_scale`` [out, groups] (``engine.quantization.tensors``); the twin's own
``weight_loader`` slices both, since scales are stored one row per output channel. The CPU
``forward`` dequantizes and multiplies (the reference); the CUDA fused step multiplies through
``engine.fused_step.gemm``'s quantized branch.

A model is built with plain layers; ``quantize_linears`` then swaps each for its twin, either
empty (before a checkpoint loads into it) or quantized from the loaded weights. An empty twin
takes a quantized checkpoint's tensors as they are, and quantizes an unquantized checkpoint's
tensors one at a time as they load (per output channel, over this rank's input columns: the
result of quantizing the whole loaded layer), so the full-precision layer never exists.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from engine.errors import ModelLoadError
from engine.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from engine.quantization.scheme import WeightQuant
from engine.quantization.tensors import dequantize, quantize, storage_dtype

__all__ = [
    "QuantizedColumnParallelLinear",
    "QuantizedLinear",
    "QuantizedMergedColumnParallelLinear",
    "QuantizedQKVParallelLinear",
    "QuantizedRowParallelLinear",
    "quantize_linears",
]


class QuantizedLinear(nn.Module):
    """What the quantized twins add to a parallel linear layer (mixed in before it)."""

    weight: nn.Parameter
    weight_scale: nn.Parameter
    bias: nn.Parameter | None
    quant: WeightQuant
    tp_rank: int
    tp_size: int
    source_dtype: torch.dtype
    """The model's dtype: an unquantized checkpoint tensor is rounded to it before quantizing, as
    when it loaded into the plain layer first."""
    tp_group: Any

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        """All rows: scales are sliced their own way (blocks), so the whole tensor is read."""
        return None

    @property
    def group(self) -> int | None:
        """Input columns per scale; None for one scale per output channel."""
        return None if self.quant.block is None else self.quant.block[1]

    def _store(self, quant: WeightQuant) -> None:
        out, inp = self.weight.shape
        device = self.weight.device
        row_split = isinstance(self, RowParallelLinear) and self.tp_size > 1
        if quant.block is not None and row_split and inp % quant.block[1]:
            raise ModelLoadError(f"{quant.name}: a row-parallel shard of {inp} columns splits a scale block")
        groups = 1 if quant.block is None else math.ceil(inp / quant.block[1])
        self.quant = quant
        self.source_dtype = self.weight.dtype
        self.weight = nn.Parameter(
            torch.empty(out, inp, dtype=storage_dtype(quant.fmt), device=device), requires_grad=False
        )
        self.weight_scale = nn.Parameter(
            torch.empty(out, groups, dtype=torch.float32, device=device), requires_grad=False
        )

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, *shard: int | str) -> None:
        if param is self.weight and not self.quant.prequantized:
            self._quantize_loaded(loaded, *shard)
            return
        if param is self.weight_scale:
            loaded = self._scale_rows(loaded)
            if param.shape[1] == 1 and isinstance(self, RowParallelLinear):
                param.data.copy_(loaded[: param.shape[0]])  # one scale per output row: not split
                return
        elif param is self.weight:
            loaded = self._stored(loaded)
        super().weight_loader(param, loaded, *shard)  # type: ignore[misc]

    def _quantize_loaded(self, loaded: torch.Tensor, *shard: int | str) -> None:
        # One unquantized checkpoint tensor [out, in] (a part of a packed layer, all ranks' rows
        # and columns) -> this rank's rows of weight and weight_scale.
        loaded = loaded.to(device=self.weight.device, dtype=self.source_dtype)
        if isinstance(self, RowParallelLinear):
            # Scales per output row over this rank's columns: slice first, then quantize.
            cols = self.weight.shape[1]
            q, scale = quantize(loaded.narrow(1, self.tp_rank * cols, cols), self.quant.fmt)
            self.weight.data.copy_(q)
            self.weight_scale.data.copy_(scale)
            return
        q, scale = quantize(loaded, self.quant.fmt)  # per row: the rows this rank keeps are unchanged
        del loaded
        super().weight_loader(self.weight, q, *shard)  # type: ignore[misc]
        super().weight_loader(self.weight_scale, scale, *shard)  # type: ignore[misc]

    def _stored(self, loaded: torch.Tensor) -> torch.Tensor:
        if self.quant.packed:
            columns = self.weight.shape[1] * (self.tp_size if isinstance(self, RowParallelLinear) else 1)
            loaded = _unpack_int32(loaded)[:, :columns]
        if loaded.dtype != self.weight.dtype:
            raise RuntimeError(f"{self.quant.name} weight must be {self.weight.dtype}, not {loaded.dtype}")
        return loaded

    def _scale_rows(self, loaded: torch.Tensor) -> torch.Tensor:
        # A checkpoint scale -> [rows, groups] with one row per output channel of the checkpoint
        # tensor (at least as many rows: the shard slicing reads only its own).
        loaded = loaded.float()
        rows = self.weight.shape[0] * self.tp_size
        if loaded.numel() == 1:  # per tensor
            return loaded.reshape(1, 1).expand(rows, 1)
        if self.quant.block is None:  # per channel: [out] or [out, 1]
            return loaded.reshape(-1, 1)
        if loaded.dim() != 2:
            raise RuntimeError(f"block scales must be 2-D, not {tuple(loaded.shape)}")
        return loaded.repeat_interleave(self.quant.block[0], dim=0)

    def quantize_from(self, weight: torch.Tensor) -> None:
        """Fill this layer from an unquantized (already sharded) weight [out, in]."""
        q, scale = quantize(weight, self.quant.fmt)
        self.weight.data.copy_(q)
        self.weight_scale.data.copy_(scale)

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        return dequantize(self.weight, self.weight_scale, self.group, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, in] -> [num_tokens, out] (row-parallel: summed over ranks)
        w = self.dequantized(x.dtype)
        if not isinstance(self, RowParallelLinear):
            return F.linear(x, w, self.bias)
        y = F.linear(x, w, self.bias if self.tp_rank == 0 else None)
        if self.tp_size > 1:
            dist.all_reduce(y, group=self.tp_group)
        return y


class QuantizedColumnParallelLinear(QuantizedLinear, ColumnParallelLinear):
    pass


class QuantizedMergedColumnParallelLinear(QuantizedLinear, MergedColumnParallelLinear):
    pass


class QuantizedQKVParallelLinear(QuantizedLinear, QKVParallelLinear):
    pass


class QuantizedRowParallelLinear(QuantizedLinear, RowParallelLinear):
    pass


_TWINS: dict[type[nn.Module], type[QuantizedLinear]] = {
    ColumnParallelLinear: QuantizedColumnParallelLinear,
    MergedColumnParallelLinear: QuantizedMergedColumnParallelLinear,
    QKVParallelLinear: QuantizedQKVParallelLinear,
    RowParallelLinear: QuantizedRowParallelLinear,
}


def quantize_linears(model: nn.Module, quant: WeightQuant, *, from_weights: bool) -> int:
    """Swap every parallel linear layer of ``model`` for its quantized twin; returns how many.
    ``from_weights`` quantizes the weights already loaded; otherwise the twins are left empty for
    a quantized checkpoint to load into."""
    # By name, so that each unquantized layer is freed as soon as its twin replaces it.
    names = [name for name, module in model.named_modules() if type(module) in _TWINS]
    for name in names:
        module = model.get_submodule(name)
        twin_class = _TWINS[type(module)]
        twin = twin_class.__new__(twin_class)
        twin.__dict__.update(module.__dict__)
        for store in ("_parameters", "_buffers", "_modules"):
            twin.__dict__[store] = dict(module.__dict__[store])
        weight: torch.Tensor = twin.weight  # the unquantized one, until _store replaces it
        twin._store(quant)
        if from_weights:
            twin.quantize_from(weight.data)
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, twin)
        del module, weight
    return len(names)


def _unpack_int32(packed: torch.Tensor) -> torch.Tensor:
    # compressed-tensors pack-quantized, 8 bits: four values (offset by 128) per int32, the
    # first in the lowest byte.
    if packed.dtype != torch.int32:
        raise RuntimeError(f"packed weight must be int32, not {packed.dtype}")
    shifts = torch.arange(0, 32, 8, dtype=torch.int32, device=packed.device)
    unsigned = (packed.unsqueeze(-1) >> shifts) & 0xFF  # [out, in / 4, 4]
    return (unsigned.flatten(1) - 128).to(torch.int8)
