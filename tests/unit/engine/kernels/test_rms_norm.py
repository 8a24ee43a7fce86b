"""The Triton RMSNorm (plain and fused with the residual add) against the torch layer."""

from __future__ import annotations

import pytest
import torch

from engine.kernels import rms_norm
from engine.layers import RMSNorm

_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _layer(size: int, dtype: torch.dtype, device: str, seed: int) -> RMSNorm:
    layer = RMSNorm(size, eps=1e-6)
    layer.weight.data = torch.randn(size, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)
    return layer


@pytest.mark.parametrize("dtype", _DTYPES)
def test_matches_the_torch_layer(device: str, dtype: torch.dtype) -> None:
    layer = _layer(48, dtype, device, 0)
    x = torch.randn(5, 48).to(dtype).to(device)
    got, residual = rms_norm(x, layer.weight, layer.eps)
    want = layer.forward_torch(x)
    assert residual is None
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", _DTYPES)
def test_fused_residual_add(device: str, dtype: torch.dtype) -> None:
    layer = _layer(64, dtype, device, 1)
    x = torch.randn(3, 64).to(dtype).to(device)
    res = torch.randn(3, 64).to(dtype).to(device)
    got, new_res = rms_norm(x, layer.weight, layer.eps, residual=res)
    assert new_res is not None
    # The interpreter rounds float32 -> bfloat16 toward zero (the GPU to nearest): allow one ulp.
    ulp = 2**-7 if device == "cpu" and dtype == torch.bfloat16 else 0.0
    torch.testing.assert_close(new_res, x + res, atol=0, rtol=ulp)
    torch.testing.assert_close(
        got, layer.forward_torch(x + res), atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=2e-2
    )


def test_per_head_norm_on_a_strided_view(device: str) -> None:
    # Qwen3's q_norm: q is a [tokens, heads, head_dim] view into the fused qkv output.
    layer = _layer(16, torch.float32, device, 2)
    qkv = torch.randn(4, 3 * 4 * 16).to(device)
    q = qkv[:, : 4 * 16].view(4, 4, 16)
    assert not q.is_contiguous()
    got, _ = rms_norm(q, layer.weight, layer.eps)
    torch.testing.assert_close(got, layer.forward_torch(q), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_real_shapes_on_gpu() -> None:
    for size in (1024, 4096):
        layer = _layer(size, torch.bfloat16, "cuda", 3)
        x = torch.randn(300, size, dtype=torch.bfloat16, device="cuda")
        res = torch.randn(300, size, dtype=torch.bfloat16, device="cuda")
        got, new_res = rms_norm(x, layer.weight, layer.eps, residual=res)
        torch.testing.assert_close(new_res, x + res, atol=0, rtol=0)
        want = layer.forward_torch(x + res)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)
        assert (got == want).float().mean() > 0.99  # rounded where HF rounds: almost all bit-equal


def test_layer_forward_with_residual_matches_add_then_norm(device: str) -> None:
    # The decoder's fused path (CUDA kernel, or torch on CPU) equals the unfused add then norm.
    layer = _layer(32, torch.float32, device, 3)
    x, res = torch.randn(4, 32).to(device), torch.randn(4, 32).to(device)
    normed, summed = layer.forward_with_residual(x, res)
    torch.testing.assert_close(summed, x + res, atol=0, rtol=0)
    torch.testing.assert_close(normed, layer.forward_torch(x + res), atol=1e-5, rtol=1e-5)
