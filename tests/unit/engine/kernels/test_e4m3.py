"""The kernels' E4M3 rounding gives torch's bits: every tie between two E4M3 values, saturation,
subnormals, zero, and a scale."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from engine.kernels.e4m3 import to_e4m3, widen_words_f16
from engine.quantization.kv_quant import quantize_kv


@triton.jit
def _round_kernel(x_ptr, out_ptr, inv_scale, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(out_ptr + i, to_e4m3(x, inv_scale), mask=i < n)


def _values(device: str) -> torch.Tensor:
    finite = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = finite[~finite.isnan()].unique()  # sorted, +0 once
    ties = (finite[1:] + finite[:-1]) / 2  # exactly between two neighbours: round to the even one
    spread = torch.randn(4096) * torch.exp(torch.randn(4096) * 4)
    extremes = torch.tensor([0.0, -0.0, 448.0, 464.0, 500.0, -1e9, 1e-30, 2.0**-10, 2.0**-9, 3 * 2.0**-10])
    return torch.cat([finite, ties, ties.nextafter(torch.tensor(0.0)), spread, extremes]).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 0.5, 3.0])
def test_same_bits_as_torch(device: str, dtype: torch.dtype, scale: float) -> None:
    x = _values(device).to(dtype)
    got = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=device)
    _round_kernel[(triton.cdiv(x.numel(), 1024),)](x, got, 1.0 / scale, x.numel(), BLOCK=1024)
    want = quantize_kv(x, scale)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@triton.jit
def _widen_kernel(words_ptr, out_ptr, ROWS: tl.constexpr, WORDS: tl.constexpr, INTERPRETED: tl.constexpr):
    r = tl.arange(0, ROWS)
    w = tl.arange(0, WORDS)
    words = tl.load(words_ptr + r[:, None] * WORDS + w[None, :])
    c = tl.arange(0, 4 * WORDS)
    tl.store(out_ptr + r[:, None] * 4 * WORDS + c[None, :], widen_words_f16(words, INTERPRETED))


def test_words_widen_to_the_values_they_hold(device: str) -> None:
    # Every E4M3 byte but NaN, in every position of its word, laid out as an FP8 cache tile. On a
    # GPU the PTX; under the interpreter the bytes cast one by one, the same reordering after.
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    values = values[~values.float().isnan()]
    order = torch.randperm(64 * 128, generator=torch.Generator().manual_seed(0)) % values.numel()
    tile = values[order].view(64, 128).to(device)
    out = torch.empty(64, 128, dtype=torch.float16, device=device)
    _widen_kernel[(1,)](tile.view(torch.int32), out, ROWS=64, WORDS=32, INTERPRETED=device == "cpu")
    assert torch.equal(out, tile.to(torch.float16))
