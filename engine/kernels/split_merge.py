# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""The merge of split-K (flash-decoding) attention partials, as a kernel or inside the next GEMM.

Decode attention over few sequences cuts each sequence's keys in ``S`` splits; split ``s`` of
head ``h`` leaves a partial output ``o[h, s]`` (normalised over its own keys) and its log-sum-exp
``lse[h, s]``. The head's output is their softmax-weighted sum::

    m = max_s lse[h, s]      w_s = exp(lse[h, s] - m)      out[h] = sum_s w_s o[h, s] / sum_s w_s

At one sequence the merge is a whole dependent launch per layer for a few kilobytes, so
``PendingMerge`` hands the partials to o_proj, whose one-row GEMM merges the values it loads
(``skinny_gemm``, or ``quant_gemv`` for FP8 / INT8 weights; ``CudaTuning.merge_in_gemm``).
Every o_proj program re-reads its K slice's partials, so that GEMM runs fewer, wider programs
than a plain one-row GEMM. All paths call ``merge_splits``, which sums the splits one at a time
in a fixed order, so the fused and unfused results agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["PendingMerge", "merge_splits"]

_QUANTIZED = (torch.float8_e4m3fn, torch.int8)
_ACTIVATIONS = (torch.bfloat16, torch.float16, torch.float32)


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

    def merge_into(self, out: torch.Tensor, tuning: CudaTuning = DEFAULT_TUNING) -> torch.Tensor:
        """Merge into ``out`` [num_tokens, num_heads, head_dim] by the merge kernel; returns out."""
        t, h, splits, head_dim = self.partials.shape
        _merge_kernel[(t, h)](
            self.partials, self.lse, out,
            self.partials.stride(0), self.partials.stride(1), self.partials.stride(2),
            self.lse.stride(0), self.lse.stride(1), out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, D=triton.next_power_of_2(head_dim), NUM_SPLITS=splits,
            num_warps=tuning.merge_warps, **pdl_launch(out, tuning.pdl),
        )  # fmt: skip
        return out

    def fuses_into(self, weight: torch.Tensor, *, quantized: bool = False) -> bool:
        """Whether the one-row GEMM with ``weight`` [n, num_heads * head_dim] can merge these:
        ``skinny_gemm``, or with ``quantized`` ``quant_gemv`` (an FP8 / INT8 weight)."""
        return (
            self.partials.shape[0] == 1
            and weight.shape[1] == self.shape[1]
            and (weight.dtype in _QUANTIZED if quantized else weight.dtype == self.dtype)
            and self.dtype in _ACTIVATIONS
            and self.partials.stride(3) == 1
        )
