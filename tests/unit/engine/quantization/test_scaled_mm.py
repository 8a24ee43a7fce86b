"""FP8 x FP8 ``torch._scaled_mm`` (activations quantized per row) against the weight-only reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.quantization.scaled_mm import fp8_scaled_mm, fp8_scaled_mm_fits
from engine.quantization.tensors import dequantize, quantize


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_close_to_weight_only_reference(device: str, dtype: torch.dtype) -> None:
    # On the GPU this is cuBLASLt's row-wise scaling; some CPU builds take per-tensor scales only.
    torch.manual_seed(0)
    w = torch.randn(48, 64) / 8
    q, scale = quantize(w, "fp8")
    x = torch.randn(40, 64).to(dtype)
    bias = torch.randn(48).to(dtype)
    assert fp8_scaled_mm_fits(x, q, None)
    got = fp8_scaled_mm(x.to(device), q.to(device), scale.to(device), bias.to(device)).cpu()
    want = F.linear(x.float(), dequantize(q, scale), bias.float())
    assert got.dtype == dtype and got.shape == (40, 48)
    # One E4M3 rounding of each activation: a relative error of at most 2**-4 per product.
    error = (got.float() - want).norm() / want.norm()
    assert 0 < error < 0.03


def test_takes_only_fp8_per_channel_weights_of_aligned_shape() -> None:
    x = torch.randn(32, 64)
    q8, _ = quantize(torch.randn(48, 64), "int8")
    f8, _ = quantize(torch.randn(48, 64), "fp8")
    assert fp8_scaled_mm_fits(x, f8, None)
    assert not fp8_scaled_mm_fits(x, q8, None)
    assert not fp8_scaled_mm_fits(x, f8, 128)  # block scales: dequantized instead
    assert not fp8_scaled_mm_fits(torch.randn(32, 60), quantize(torch.randn(48, 60), "fp8")[0], None)
