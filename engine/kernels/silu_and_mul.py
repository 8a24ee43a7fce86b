# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""SwiGLU's gate in Triton: silu(gate) * up over a merged [gate | up] row, one pass.

Rounded like the torch layer: silu in float32 rounded to the dtype, then the product rounded.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["silu_and_mul"]


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, size, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < size
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + size + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
    out = silu.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * size + cols, out.to(gate.dtype), mask=mask)


def silu_and_mul(x: torch.Tensor, *, tuning: CudaTuning = DEFAULT_TUNING) -> torch.Tensor:
    """x: [num_tokens, 2 * intermediate] -> [num_tokens, intermediate]."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    num_tokens, size = x.shape[0], x.shape[1] // 2
    out = torch.empty(num_tokens, size, dtype=x.dtype, device=x.device)
    if num_tokens == 0:
        return out
    block = min(1024, triton.next_power_of_2(size))
    _silu_and_mul_kernel[(num_tokens, triton.cdiv(size, block))](
        x, out, x.stride(0), size, BLOCK=block, **pdl_launch(x, tuning.pdl)
    )
    return out
