"""The Triton SiLU-and-mul against the torch layer."""

from __future__ import annotations

import pytest
import torch

from engine.kernels import silu_and_mul
from engine.layers import SiluAndMul


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_the_torch_layer(device: str, dtype: torch.dtype) -> None:
    x = (torch.randn(6, 2 * 40) * 3).to(dtype).to(device)
    got = silu_and_mul(x)
    want = SiluAndMul()(x)
    assert got.shape == (6, 40) and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=2e-2)


def test_no_tokens(device: str) -> None:
    assert silu_and_mul(torch.empty(0, 8, device=device)).shape == (0, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_real_shapes_on_gpu() -> None:
    for size in (3072, 14336):
        x = torch.randn(257, 2 * size, dtype=torch.bfloat16, device="cuda")
        torch.testing.assert_close(silu_and_mul(x), SiluAndMul()(x), atol=2e-2, rtol=1e-2)
