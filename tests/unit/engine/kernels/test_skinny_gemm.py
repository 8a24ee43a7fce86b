"""The Triton skinny GEMM against F.linear (its speed per decode shape: ``bench.engine.skinny_gemm_sweep``)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from bench.engine.skinny_gemm_sweep import MODEL_SHAPES
from engine.kernels import SkinnyGemmConfig, skinny_gemm, skinny_gemm_config
from engine.layers import ColumnParallelLinear, RowParallelLinear
from engine.tuning import DEFAULT_TUNING

# The interpreter rounds float32 -> bfloat16/float16 toward zero (the GPU to nearest): one ulp.
_RTOL = {torch.float32: 1e-5, torch.float16: 2**-10, torch.bfloat16: 2**-7}
_VARIANTS = [
    SkinnyGemmConfig(block_n=16, block_k=32, split_k=2),
    SkinnyGemmConfig(block_n=32, block_k=16, split_k=4, use_dot=False),
    SkinnyGemmConfig(block_n=16, block_k=64, use_dot=False),
    SkinnyGemmConfig(block_n=64, block_k=128, split_k=8),  # more splits asked than K has
]

_needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


def _operands(
    m: int, n: int, k: int, dtype: torch.dtype, device: str, bias: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    x = torch.randn(m, k).to(dtype).to(device)
    w = (torch.randn(n, k) / math.sqrt(k)).to(dtype).to(device)
    b = torch.randn(n).to(dtype).to(device) if bias else None
    return x, w, b


def _check(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    want = F.linear(x.float(), w.float(), None if b is None else b.float())
    assert got.dtype == x.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want, atol=1e-4, rtol=_RTOL[x.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("config", [None, _VARIANTS[0], _VARIANTS[1]])
def test_silu_mul_prologue_matches_the_separate_activation(
    device: str, dtype: torch.dtype, m: int, config: SkinnyGemmConfig | None
) -> None:
    from engine.layers import SiluAndMul

    n, k = 48, 96
    gate_up = (torch.randn(m, 2 * k) * 2).to(dtype).to(device)
    w = (torch.randn(n, k) / math.sqrt(k)).to(dtype).to(device)
    got = skinny_gemm(gate_up, w, config=config, silu_mul=True)
    want = skinny_gemm(SiluAndMul()(gate_up), w, config=config)
    if dtype == torch.float32 or device == "cuda":
        # Rounded where silu_and_mul rounds: the same as the activation kernel then the GEMM.
        torch.testing.assert_close(got.float(), want.float(), atol=1e-5, rtol=_RTOL[dtype])
    else:
        # The interpreter rounds to bfloat16 toward zero, torch to nearest: an ulp per input.
        torch.testing.assert_close(got.float(), want.float(), atol=0.15, rtol=0.05)
    with pytest.raises(ValueError, match="does not fit"):
        skinny_gemm(gate_up[:, :k], w, silu_mul=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize(("n", "k"), [(48, 64), (80, 96)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_f_linear(device: str, dtype: torch.dtype, m: int, n: int, k: int, bias: bool) -> None:
    x, w, b = _operands(m, n, k, dtype, device, bias)
    _check(skinny_gemm(x, w, b), x, w, b)


@pytest.mark.parametrize("config", _VARIANTS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_variant_matches(device: str, config: SkinnyGemmConfig, dtype: torch.dtype) -> None:
    # Ragged column blocks, ragged last K step, splits, both inner products, more than 16 rows.
    for m, bias in ((1, True), (5, False), (19, True)):
        x, w, b = _operands(m, 80, 96, dtype, device, bias)
        _check(skinny_gemm(x, w, b, config), x, w, b)


def test_rows_do_not_depend_on_the_batch(device: str) -> None:
    x, w, b = _operands(8, 80, 96, torch.float32, device, bias=True)
    batch = skinny_gemm(x, w, b)
    assert torch.equal(skinny_gemm(x[3:5], w, b), batch[3:5])  # the default for 2..16 rows
    for config in _VARIANTS:
        batch = skinny_gemm(x, w, b, config)
        for i in (0, 5):
            assert torch.equal(skinny_gemm(x[i : i + 1], w, b, config)[0], batch[i])
        assert torch.equal(skinny_gemm(x, w, b, config), batch)  # and the split sum is deterministic


def test_strided_and_batched_inputs(device: str) -> None:
    x, w, b = _operands(6, 48, 64, torch.float32, device, bias=True)
    wide = torch.cat([x, x], dim=1)[:, 64:]  # row stride 128, not contiguous
    torch.testing.assert_close(skinny_gemm(wide, w, b), F.linear(x, w, b), atol=1e-4, rtol=1e-5)
    got = skinny_gemm(x.view(2, 3, 64), w, b)
    assert got.shape == (2, 3, 48)
    torch.testing.assert_close(got.view(6, 48), F.linear(x, w, b), atol=1e-4, rtol=1e-5)
    assert skinny_gemm(x[:0], w, b).shape == (0, 48)


def test_rejects_bad_arguments(device: str) -> None:
    x, w, _ = _operands(2, 48, 64, torch.float32, device)
    with pytest.raises(ValueError, match="one dtype"):
        skinny_gemm(x, w.to(torch.bfloat16))
    with pytest.raises(ValueError, match="power of two"):
        SkinnyGemmConfig(block_n=48)
    with pytest.raises(ValueError, match="at least 16"):
        SkinnyGemmConfig(block_n=8)
    with pytest.raises(ValueError, match="positive"):
        SkinnyGemmConfig(split_k=0)


def test_heuristic_splits_narrow_weights_and_ignores_batches_of_two_or_more() -> None:
    for n, k in itertools.chain.from_iterable(s.values() for s in MODEL_SHAPES.values()):
        single, batch = skinny_gemm_config(1, n, k), skinny_gemm_config(2, n, k)
        assert not single.use_dot and batch.use_dot
        assert all(skinny_gemm_config(m, n, k) == batch for m in range(3, 17))
    assert skinny_gemm_config(1, 1024, 2048).split_k == 4  # Qwen3-0.6B o_proj: 1024 columns only
    assert skinny_gemm_config(8, 151936, 1024).split_k == 1


def test_one_row_shape_follows_the_tuning() -> None:
    # Qwen3-0.6B's o_proj at one row: the whole K slice in one tile, from the tuning's fields.
    default = skinny_gemm_config(1, 1024, 2048)
    assert (default.block_n, default.block_k, default.split_k, default.num_warps) == (16, 512, 4, 8)
    tuned = replace(DEFAULT_TUNING, one_row_block_n=32, one_row_split_k=8, one_row_warps=4)
    assert skinny_gemm_config(1, 1024, 2048, tuning=tuned) == SkinnyGemmConfig(
        block_n=32, block_k=256, split_k=8, use_dot=False, num_warps=4
    )
    tiles = skinny_gemm_config(1, 1024, 2048, tuning=replace(DEFAULT_TUNING, prefetch_whole_slice=False))
    assert (tiles.block_k, tiles.num_warps) == (256, 4)


def test_layers_use_f_linear() -> None:
    column, row = ColumnParallelLinear(64, 48, bias=True), RowParallelLinear(48, 64, bias=True)
    for layer in (column, row):
        assert layer.bias is not None
        torch.nn.init.normal_(layer.weight)
        torch.nn.init.normal_(layer.bias)
        x = torch.randn(3, layer.weight.shape[1])
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.gpu
@_needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_real_shapes_on_gpu(model: str, m: int, dtype: torch.dtype) -> None:
    for name, (n, k) in MODEL_SHAPES[model].items():
        x, w, b = _operands(m, n, k, dtype, "cuda", bias=name == "qkv")
        got = skinny_gemm(x, w, b)
        torch.testing.assert_close(got, F.linear(x, w, b), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@_needs_gpu
def test_graph_capture_on_gpu() -> None:
    x, w, b = _operands(4, 4096, 1024, torch.bfloat16, "cuda", bias=True)
    static_x = x.clone()
    skinny_gemm(static_x, w, b, SkinnyGemmConfig(split_k=4))  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = skinny_gemm(static_x, w, b, SkinnyGemmConfig(split_k=4))
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(y, F.linear(static_x, w, b), atol=2e-2, rtol=2e-2)


def test_fused_step_takes_few_half_precision_rows_to_the_skinny_gemm(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.fused_step import gemm

    calls: list[int] = []
    monkeypatch.setattr(gemm, "skinny_gemm", lambda x, w, b, **_: calls.append(len(x)) or F.linear(x, w, b))
    layer = RowParallelLinear(64, 32, bias=True).to(device=device, dtype=torch.bfloat16)
    for rows in (1, gemm.SKINNY_GEMM_MAX_ROWS, gemm.SKINNY_GEMM_MAX_ROWS + 1):
        gemm.row(layer, torch.randn(rows, 64, dtype=torch.bfloat16, device=device), DEFAULT_TUNING)
    gemm.row(layer.float(), torch.randn(2, 64, device=device), DEFAULT_TUNING)  # float32: cuBLAS
    layer.bfloat16()
    cublas_only = replace(DEFAULT_TUNING, skinny_gemm=False)
    gemm.row(layer, torch.randn(2, 64, dtype=torch.bfloat16, device=device), cublas_only)
    assert calls == [1, gemm.SKINNY_GEMM_MAX_ROWS]
