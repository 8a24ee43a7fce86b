# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""The merge of split-K (flash-decoding) attention partials, as a kernel or inside the next GEMM.

Decode attention over few sequences cuts each sequence's keys in ``S`` splits; split ``s`` of
head ``h`` leaves a partial output ``o[h, s]`` (normalised over its own keys) and its log-sum-exp
``lse[h, s]``. The head's output is their softmax-weighted sum::

    m = max_s lse[h, s]      w_s = exp(lse[h, s] - m)      out[h] = sum_s w_s o[h, s] / sum_s w_s

At one sequence the merge is a whole dependent launch per layer for a few kilobytes, so
``PendingMerge`` hands the partials to o_proj, whose one-row GEMM merges the values it loads
(``skinny_gemm``). Both paths call ``merge_splits``, which sums the splits one at a time in a
fixed order, so the fused and unfused results agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait

__all__ = ["FUSE_INTO_GEMM", "MERGE_BLOCK_N", "MERGE_MAX_K", "MERGE_SPLIT_K", "PendingMerge", "merge_splits"]

FUSE_INTO_GEMM = True
"""One decode token on CUDA: attention returns its partials for o_proj to merge (benchmarks flip
it). Every o_proj program re-reads its K slice's partials (32 KB at Qwen3-0.6B's 16 splits), so
the program count decides: the bucket-1 graph of Qwen3-0.6B on an H200 took 675 µs with 128
programs of 32 rows against 708–720 with the merge kernel, 729 with 256 programs and 741 with 64."""
MERGE_MAX_K = 2048
"""Widest o_proj input merged inside it. Wider models (Llama-3-8B: 4,096) keep the merge kernel:
their o_proj would re-read 32 MB of partials a layer, as much as its weights, unmeasured."""
MERGE_BLOCK_N = 32
"""W rows per program of the GEMM that merges: fewer, wider programs than a plain one-row GEMM's
16 (benchmarks sweep it)."""
MERGE_SPLIT_K: int | None = None
"""K slices of that GEMM; None: the plain one-row GEMM's (benchmarks sweep it)."""
MERGE_WARPS = 4
"""Warps per program of the merge kernel (benchmarks sweep it)."""


@triton.jit
def merge_splits(part_ptr, lse_ptr, head, d, mask, stride_ph, stride_ps, stride_lh, SPLITS: tl.constexpr):
    """Merged float32 values at (head, d) (tensors of one shape) of one token's partials."""
    lse_row = lse_ptr + head * stride_lh
    m = tl.load(lse_row, mask=mask, other=float("-inf"))
    for s in tl.static_range(1, SPLITS):
        m = tl.maximum(m, tl.load(lse_row + s, mask=mask, other=float("-inf")))
    m = tl.where(m == float("-inf"), 0.0, m)  # a head without keys: every weight is 0
    total = tl.zeros_like(m)
    acc = tl.zeros_like(m)
    part_row = part_ptr + head * stride_ph + d
    for s in tl.static_range(SPLITS):
        w = tl.exp(tl.load(lse_row + s, mask=mask, other=float("-inf")) - m)
        total += w
        acc += tl.load(part_row + s * stride_ps, mask=mask, other=0.0) * w
    return acc / tl.where(total > 0, total, 1.0)


@triton.jit
def _merge_kernel(
    part_ptr, lse_ptr, out_ptr,
    stride_pt, stride_ph, stride_ps, stride_lt, stride_lh, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_wait(PDL)
    token = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, D)
    mask = d < HEAD_DIM
    out = merge_splits(part_ptr + token * stride_pt, lse_ptr + token * stride_lt, head + 0 * d, d, mask,
                       stride_ph, stride_ps, stride_lh, NUM_SPLITS)  # fmt: skip
    tl.store(out_ptr + token * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class PendingMerge:
    """Attention's output before its split merge: ``[num_tokens, num_heads * head_dim]`` once merged."""

    partials: torch.Tensor
    """[num_tokens, num_heads, splits, head_dim] float32."""
    lse: torch.Tensor
    """[num_tokens, num_heads, splits] float32."""
    dtype: torch.dtype
    """The merged output's dtype (the activations')."""

    @property
    def shape(self) -> tuple[int, int]:
        t, h, _, d = self.partials.shape
        return t, h * d

    @property
    def is_cuda(self) -> bool:
        return self.partials.is_cuda

    def merge_into(self, out: torch.Tensor) -> torch.Tensor:
        """Merge into ``out`` [num_tokens, num_heads, head_dim] by the merge kernel; returns out."""
        t, h, splits, head_dim = self.partials.shape
        _merge_kernel[(t, h)](
            self.partials, self.lse, out,
            self.partials.stride(0), self.partials.stride(1), self.partials.stride(2),
            self.lse.stride(0), self.lse.stride(1), out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, D=triton.next_power_of_2(head_dim), NUM_SPLITS=splits, num_warps=MERGE_WARPS,
            **pdl_launch(out),
        )  # fmt: skip
        return out

    def materialize(self) -> torch.Tensor:
        """The merged output, flattened: [num_tokens, num_heads * head_dim]."""
        t, h, _, d = self.partials.shape
        out = torch.empty(t, h, d, dtype=self.dtype, device=self.partials.device)
        return self.merge_into(out).flatten(1)

    def fuses_into(self, weight: torch.Tensor) -> bool:
        """Whether the one-row skinny GEMM with ``weight`` [n, num_heads * head_dim] merges these."""
        return (
            self.partials.shape[0] == 1
            and weight.shape[1] == self.shape[1] <= MERGE_MAX_K
            and weight.dtype == self.dtype
            and self.partials.stride(3) == 1
        )
