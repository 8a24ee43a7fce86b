"""Linear layers split across tensor-parallel ranks; each ``weight_loader`` slices its own shard.

    ColumnParallelLinear   W: [out, in] split on out   (q/k/v, gate/up)  output stays sharded
    RowParallelLinear      W: [out, in] split on in    (o_proj, down)    output all-reduced

Merged and QKV variants pack several checkpoint tensors into one matmul; the loader is told
which part (``shard_id``) a checkpoint tensor is. ``checkpoint_rows`` tells the checkpoint reader
in advance which rows of a tensor split on its first dimension the loader will take, so a rank
reads only those. Every layer holds ``weight`` [out, in] (and
``bias``) as loaded; ``forward`` is ``F.linear`` (and the all-reduce). On CUDA the engine runs
these weights through its fused step instead (``engine.fused_step.gemm``, which reads ``weight``
and ``bias``). A quantized variant overrides ``weight_loader`` (how its shard is stored) and
``forward`` (how it multiplies), and gets a matching branch in ``fused_step.gemm``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from engine.worker.distributed import tp_group, tp_rank, tp_world_size

__all__ = [
    "ColumnParallelLinear",
    "MergedColumnParallelLinear",
    "QKVParallelLinear",
    "RowParallelLinear",
]


def _divide(a: int, b: int) -> int:
    if a % b:
        raise ValueError(f"{a} is not divisible by tensor-parallel size {b}")
    return a // b


class _ParallelLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.tp_rank = tp_rank()
        self.tp_size = tp_world_size()
        self.tp_group = tp_group()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        """The rows [start, stop) of the checkpoint tensor ``weight_loader`` takes; None: all."""
        return None

    def _rank_rows(self, size: int) -> tuple[int, int] | None:
        return None if self.tp_size == 1 else (self.tp_rank * size, (self.tp_rank + 1) * size)


class ColumnParallelLinear(_ParallelLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, _divide(out_features, tp_world_size()), bias)

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        return self._rank_rows(param.shape[0])

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        size = param.shape[0]
        param.data.copy_(loaded.narrow(0, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, in] -> [num_tokens, out / tp]
        return F.linear(x, self.weight, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs in one weight, e.g. [gate | up]."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        self.out_sizes = out_sizes
        super().__init__(in_features, sum(out_sizes), bias)

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        return self._rank_rows(self.out_sizes[int(shard_id or 0)] // self.tp_size)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: int) -> None:  # type: ignore[override]
        offset = sum(self.out_sizes[:shard_id]) // self.tp_size
        size = self.out_sizes[shard_id] // self.tp_size
        shard = loaded.narrow(0, self.tp_rank * size, size)
        param.data.narrow(0, offset, size).copy_(shard)


class QKVParallelLinear(ColumnParallelLinear):
    """[q | k | v] in one weight; each rank holds its own query and key/value heads."""

    def __init__(
        self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: int, bias: bool = False
    ) -> None:
        tp = tp_world_size()
        self.head_dim = head_dim
        self.num_heads = _divide(num_heads, tp)
        self.num_kv_heads = _divide(num_kv_heads, tp)
        super().__init__(hidden, (num_heads + 2 * num_kv_heads) * head_dim, bias)

    def checkpoint_rows(
        self, param: nn.Parameter, shard_id: int | str | None = None
    ) -> tuple[int, int] | None:
        heads = self.num_heads if shard_id == "q" else self.num_kv_heads
        return self._rank_rows(heads * self.head_dim)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str) -> None:  # type: ignore[override]
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        offset, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard_id]
        shard = loaded.narrow(0, self.tp_rank * size, size)
        param.data.narrow(0, offset, size).copy_(shard)


class RowParallelLinear(_ParallelLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(_divide(in_features, tp_world_size()), out_features, bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        if param.dim() == 1:  # bias is not split; only rank 0 adds it
            param.data.copy_(loaded)
            return
        size = param.shape[1]
        param.data.copy_(loaded.narrow(1, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, in / tp] -> [num_tokens, out], summed over ranks
        y = F.linear(x, self.weight, self.bias if self.tp_rank == 0 else None)
        if self.tp_size > 1:
            dist.all_reduce(y, group=self.tp_group)
        return y
