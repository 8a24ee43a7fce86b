"""INT8 -> float32 through a float's mantissa gives the plain conversion's bits for every byte."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from engine.kernels.int8 import int8_to_float


@triton.jit
def _convert_kernel(w_ptr, out_ptr, INT8_CONVERT: tl.constexpr, INTERPRETED: tl.constexpr):
    i = tl.arange(0, 256)
    tl.store(out_ptr + i, int8_to_float(tl.load(w_ptr + i), INT8_CONVERT, INTERPRETED))


# On CPU "magic_asm" runs its Triton form (the interpreter runs no assembly); its PTX is compiled
# by test_hopper_compile and run here on a GPU.
@pytest.mark.parametrize("convert", ["cvt", "magic", "magic_asm"])
def test_every_int8_value_exactly(device: str, convert: str) -> None:
    w = torch.arange(-128, 128, dtype=torch.int8)[torch.randperm(256)].to(device)
    got = torch.empty(256, dtype=torch.float32, device=device)
    _convert_kernel[(1,)](w, got, INT8_CONVERT=convert, INTERPRETED=device == "cpu")
    assert torch.equal(got.view(torch.int32), w.float().view(torch.int32))
