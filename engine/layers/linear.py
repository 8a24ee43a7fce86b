"""Linear layers split across tensor-parallel ranks; each ``weight_loader`` slices its own shard.

    ColumnParallelLinear   W: [out, in] split on out   (q/k/v, gate/up)  output stays sharded
    RowParallelLinear      W: [out, in] split on in    (o_proj, down)    output all-reduced

Merged and QKV variants pack several checkpoint tensors into one matmul; the loader is told
which part (``shard_id``) a checkpoint tensor is.

On CUDA, half-precision matmuls of at most ``SKINNY_GEMM_MAX_ROWS`` rows (decode steps) run the
weight-streaming Triton kernel ``engine.kernels.skinny_gemm`` instead of cuBLAS, whose launch
and tiling overheads dominate there. ``STRONGROOM_SKINNY_GEMM=0`` (read at import) or setting
``USE_SKINNY_GEMM = False`` before CUDA graphs are captured turns it off.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from engine.worker.distributed import tp_rank, tp_world_size

if TYPE_CHECKING:
    from engine.kernels.normed_gemv import PendingNorm
    from engine.kernels.skinny_gemm import SplitKPartials
    from engine.kernels.split_merge import PendingMerge

__all__ = [
    "ColumnParallelLinear",
    "MergedColumnParallelLinear",
    "QKVParallelLinear",
    "RowParallelLinear",
    "is_skinny",
]


SKINNY_GEMM_MAX_ROWS = 16
USE_SKINNY_GEMM = os.environ.get("STRONGROOM_SKINNY_GEMM", "1") != "0"
DEFER_SPLIT_SUM = os.environ.get("STRONGROOM_DEFER_SPLIT_SUM", "1") != "0"
"""Row-parallel skinny GEMMs (one rank) hand their split-K partials to the next RMSNorm."""


def is_skinny(x: torch.Tensor) -> bool:
    """Whether a matmul of x (rows of its last dim) runs the skinny-GEMM kernel."""
    return (
        USE_SKINNY_GEMM
        and x.is_cuda
        and x.dtype in (torch.bfloat16, torch.float16)
        and x.numel() <= SKINNY_GEMM_MAX_ROWS * x.shape[-1]
    )


def _fuses(x: PendingNorm | PendingMerge, weight: torch.Tensor) -> bool:
    # Whether the GEMM with weight takes the pending norm or merge into its own loads.
    return USE_SKINNY_GEMM and x.fuses_into(weight)


def _matmul(
    x: torch.Tensor | PendingNorm | PendingMerge, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    # x: [num_tokens, in] -> [num_tokens, out]; or, at one row on CUDA, the norm left to this GEMM
    # (RMSNorm's defer) or attention's split partials left to it (decode_attention's defer_merge)
    if not isinstance(x, torch.Tensor):
        if _fuses(x, weight):
            from engine.kernels import PendingMerge, normed_gemv, skinny_gemm

            if isinstance(x, PendingMerge):
                return skinny_gemm(x, weight, bias)
            return normed_gemv(x, weight, bias)
        x = x.materialize()
    if is_skinny(x):
        from engine.kernels import skinny_gemm

        return skinny_gemm(x, weight, bias)
    return F.linear(x, weight, bias)


def _divide(a: int, b: int) -> int:
    if a % b:
        raise ValueError(f"{a} is not divisible by tensor-parallel size {b}")
    return a // b


class _ParallelLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.tp_rank = tp_rank()
        self.tp_size = tp_world_size()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None


class ColumnParallelLinear(_ParallelLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, _divide(out_features, tp_world_size()), bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        size = param.shape[0]
        param.data.copy_(loaded.narrow(0, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor | PendingNorm) -> torch.Tensor:
        return _matmul(x, self.weight, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs in one weight, e.g. [gate | up]."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        self.out_sizes = out_sizes
        super().__init__(in_features, sum(out_sizes), bias)

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

    def forward(self, x: torch.Tensor | PendingMerge) -> torch.Tensor:
        y = _matmul(x, self.weight, self.bias if self.tp_rank == 0 else None)
        if self.tp_size > 1:
            dist.all_reduce(y)
        return y

    def forward_deferred(self, x: torch.Tensor | PendingMerge) -> torch.Tensor | SplitKPartials:
        """``forward``, or, for a skinny 2-D x on one rank, possibly the GEMM's split-K partials
        for the next RMSNorm to sum (``RMSNorm.forward_with_residual`` takes either). x may be
        attention's unmerged partials (o_proj at one decode token)."""
        if not isinstance(x, torch.Tensor) and not _fuses(x, self.weight):
            x = x.materialize()  # merged by its own kernel; the tensor rule below still defers the sum
        if not self._defers(x):
            return self.forward(x)
        from engine.kernels import skinny_gemm_deferred

        return skinny_gemm_deferred(x, self.weight, self.bias)

    def forward_silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor | SplitKPartials:
        """forward(silu(gate) * up) for a merged [gate | up] input that ``is_skinny``: the
        activation is made inside the GEMM's loads (one launch and one tensor fewer). Partials
        as ``forward_deferred``."""
        from engine.kernels import skinny_gemm, skinny_gemm_deferred

        if self._defers(gate_up):
            return skinny_gemm_deferred(gate_up, self.weight, self.bias, silu_mul=True)
        y = skinny_gemm(gate_up, self.weight, self.bias if self.tp_rank == 0 else None, silu_mul=True)
        if self.tp_size > 1:
            dist.all_reduce(y)
        return y

    def _defers(self, x: torch.Tensor | PendingMerge) -> bool:
        # All-reduce needs the summed output, so only a single rank defers. Partials reach here
        # only when this GEMM merges them (forward_deferred materializes the others).
        if not (DEFER_SPLIT_SUM and self.tp_size == 1):
            return False
        return not isinstance(x, torch.Tensor) or (x.dim() == 2 and is_skinny(x))
