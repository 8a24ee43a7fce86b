"""The Triton skinny GEMM against F.linear; on a GPU also its speed (``bench_skinny_gemm``).

Run as a script on a GPU machine to time every block-size variant per decode shape::

    python tests/unit/engine/kernels/test_skinny_gemm.py [--quick] [--out results.txt]
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

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

# Decode GEMMs per model: name -> (N, K) of W [N, K].
MODEL_SHAPES = {
    "qwen3-0.6b": {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072),
                   "lm_head": (151936, 1024)},
    "llama-3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                   "lm_head": (128256, 4096)},
}  # fmt: skip
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
        ours, torch_us = _time_us(lambda x, w: skinny_gemm(x, w), x, w), _time_us(F.linear, x, w)
        print(f"{model} {name} M={m} {dtype}: ours {ours:.1f} µs, F.linear {torch_us:.1f} µs")


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


def _time_us(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, w: torch.Tensor,
             reps: int = 200) -> float:  # fmt: skip
    """GPU µs per call, from ``reps`` calls replayed in one CUDA graph (as decode runs them).

    The calls cycle through enough copies of W to overflow L2, so W comes from HBM as it does
    when every layer has its own weights.
    """
    copies = [w] + [w.clone() for _ in range(min(reps, math.ceil(256e6 / w.nbytes)) - 1)]
    fn(x, w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fn(x, copies[i % len(copies)])
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (3 * reps)


def _sweep(quick: bool) -> list[SkinnyGemmConfig]:
    if quick:
        return [SkinnyGemmConfig(block_n=bn, block_k=bk, split_k=s, use_dot=d)
                for bn, bk, s, d in itertools.product((16, 32, 64), (128, 256), (1, 4), (True, False))]  # fmt: skip
    grid = itertools.product((16, 32, 64, 128), (128, 256, 512), (1, 2, 4, 8), (True, False), (4, 8), (3,))
    return [SkinnyGemmConfig(block_n=bn, block_k=bk, split_k=s, use_dot=d, num_warps=nw, num_stages=ns)
            for bn, bk, s, d, nw, ns in grid]  # fmt: skip


def bench_skinny_gemm(
    ms: Iterable[int] = (1, 8),
    variants: list[SkinnyGemmConfig] | None = None,
    models: Iterable[str] = tuple(MODEL_SHAPES),
    dtype: torch.dtype = torch.bfloat16,
    top: int = 5,
    out: Callable[[str], None] = print,
) -> None:
    """Print µs and GB/s of W for F.linear, the heuristic's pick and each variant, per shape."""
    variants = _sweep(quick=False) if variants is None else variants
    for model, m in itertools.product(models, ms):
        for name, (n, k) in MODEL_SHAPES[model].items():
            x, w, _ = _operands(m, n, k, dtype, "cuda")
            gbps = w.nbytes / 1e3  # / µs
            base = _time_us(F.linear, x, w)
            pick = skinny_gemm_config(m, n, k)
            mine = _time_us(lambda x, w, c=pick: skinny_gemm(x, w, config=c), x, w)
            results = []
            for config in variants:
                if config.split_k > 1 and k // config.split_k < config.block_k:
                    continue
                try:
                    torch.testing.assert_close(skinny_gemm(x, w, config=config), F.linear(x, w),
                                               atol=2e-2, rtol=2e-2)  # fmt: skip
                    results.append(
                        (_time_us(lambda x, w, c=config: skinny_gemm(x, w, config=c), x, w), config)
                    )
                except Exception as exc:  # a variant that does not compile or fit is reported, not fatal
                    out(f"    {config}: {type(exc).__name__}: {str(exc)[:120]}")
            results.sort(key=lambda r: r[0])
            out(f"{model} {name} N={n} K={k} M={m}: F.linear {base:.2f} µs {gbps / base:.0f} GB/s | "
                f"heuristic {mine:.2f} µs {gbps / mine:.0f} GB/s {pick}")  # fmt: skip
            for us, config in results[:top]:
                out(f"    {us:6.2f} µs {gbps / us:5.0f} GB/s  {config}")


if __name__ == "__main__":
    path = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None

    def write(line: str) -> None:
        print(line, flush=True)
        if path:
            with open(path, "a") as sink:
                sink.write(line + "\n")

    bench_skinny_gemm(variants=_sweep(quick="--quick" in sys.argv), out=write)
