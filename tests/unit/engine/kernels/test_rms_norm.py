"""The Triton RMSNorm (plain and fused with the residual add) against the torch layer."""

from __future__ import annotations

import pytest
import torch

from engine.kernels import (
    SkinnyGemmConfig,
    SplitKPartials,
    rms_norm,
    rms_norm_split_k,
    skinny_gemm,
    skinny_gemm_deferred,
)
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
    want = layer(x)
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
    torch.testing.assert_close(got, layer(x + res), atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=2e-2)


def test_per_head_norm_on_a_strided_view(device: str) -> None:
    # Qwen3's q_norm: q is a [tokens, heads, head_dim] view into the fused qkv output.
    layer = _layer(16, torch.float32, device, 2)
    qkv = torch.randn(4, 3 * 4 * 16).to(device)
    q = qkv[:, : 4 * 16].view(4, 4, 16)
    assert not q.is_contiguous()
    got, _ = rms_norm(q, layer.weight, layer.eps)
    torch.testing.assert_close(got, layer(q), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_real_shapes_on_gpu() -> None:
    for size in (1024, 4096):
        layer = _layer(size, torch.bfloat16, "cuda", 3)
        x = torch.randn(300, size, dtype=torch.bfloat16, device="cuda")
        res = torch.randn(300, size, dtype=torch.bfloat16, device="cuda")
        got, new_res = rms_norm(x, layer.weight, layer.eps, residual=res)
        torch.testing.assert_close(new_res, x + res, atol=0, rtol=0)
        want = layer(x + res)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)
        assert (got == want).float().mean() > 0.99  # rounded where HF rounds: almost all bit-equal


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("split_k", [1, 3, 4])
def test_split_k_partials_summed_in_the_norm_give_the_same_bits(
    device: str, dtype: torch.dtype, bias: bool, split_k: int
) -> None:
    # A skinny GEMM whose split sum is left to the norm after it: the same result, bit for bit,
    # as the GEMM summing its own partials followed by the fused add + norm.
    m, n, k = 3, 40, 96
    config = SkinnyGemmConfig(block_n=16, block_k=16, split_k=split_k)
    x = torch.randn(m, k).to(dtype).to(device)
    w = (torch.randn(n, k) / k**0.5).to(dtype).to(device)
    b = torch.randn(n).to(dtype).to(device) if bias else None
    layer = _layer(n, dtype, device, 2)
    res = torch.randn(m, n).to(dtype).to(device)
    deferred = skinny_gemm_deferred(x, w, b, config)
    assert isinstance(deferred, SplitKPartials) == (split_k > 1)
    y = skinny_gemm(x, w, b, config)
    want, want_res = rms_norm(y, layer.weight, layer.eps, residual=res)
    if isinstance(deferred, SplitKPartials):
        assert deferred.shape == (m, n)
        got, got_res = rms_norm_split_k(deferred, layer.weight, layer.eps, res)
    else:
        got, maybe_res = rms_norm(deferred, layer.weight, layer.eps, residual=res)
        assert maybe_res is not None
        got_res = maybe_res
    assert want_res is not None
    assert torch.equal(got_res, want_res) and torch.equal(got, want)
    if isinstance(deferred, SplitKPartials):
        with pytest.raises(ValueError, match="does not fit"):
            rms_norm_split_k(deferred, layer.weight, layer.eps, res[:, :8])
