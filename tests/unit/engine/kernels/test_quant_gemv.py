"""The FP8 / INT8 weight GEMV against dequantize-then-matmul (``engine.quantization.tensors``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from engine.kernels import PendingMerge, SkinnyGemmConfig, SplitKPartials
from engine.kernels.quant_gemv import quant_gemv, quant_gemv_config, quant_gemv_deferred, quant_gemv_fits
from engine.quantization.tensors import dequantize, quantize, quantize_blocks
from engine.tuning import DEFAULT_TUNING, Int8Convert

# The interpreter rounds float32 -> bfloat16 toward zero (the GPU to nearest): one ulp.
_RTOL = {torch.float32: 1e-5, torch.bfloat16: 2**-7}


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("m", "n", "k", "block"),
    [
        (1, 70, 300, None),
        (5, 96, 256, (128, 128)),
        (16, 33, 200, (16, 128)),
        (17, 70, 300, None),  # blocks of 32 rows, the one block ragged
        (100, 96, 256, (128, 128)),  # two blocks of 64 rows
    ],
)
def test_matches_dequantized_reference(
    device: str, fmt: str, dtype: torch.dtype, m: int, n: int, k: int, block: tuple[int, int] | None
) -> None:
    w = torch.randn(n, k) / k**0.5
    if block is None:
        q, scale = quantize(w, fmt)
    else:
        q, blocks = quantize_blocks(w, fmt, block)
        scale = blocks.repeat_interleave(block[0], 0)[:n].contiguous()
    group = None if block is None else block[1]
    x = torch.randn(m, k).to(dtype)
    bias = torch.randn(n).to(dtype)
    got = quant_gemv(x.to(device), q.to(device), scale.to(device), group, bias.to(device)).cpu()
    want = F.linear(x.float(), dequantize(q, scale, group), bias.float())
    assert got.dtype == dtype and got.shape == (m, n)
    torch.testing.assert_close(got.float(), want, atol=1e-4, rtol=_RTOL[dtype])


@pytest.mark.parametrize(
    "config",
    [
        SkinnyGemmConfig(
            block_n=16, block_k=64, split_k=3, use_dot=False
        ),  # ragged last split, partials summed
        SkinnyGemmConfig(block_n=32, block_k=64, split_k=2, use_dot=True),
        SkinnyGemmConfig(
            block_n=16, block_k=1024, use_dot=False
        ),  # wider than the scale group: narrowed to it
    ],
)
@pytest.mark.parametrize("block", [None, (32, 128)])
def test_every_launch_shape_matches_the_reference(
    device: str, config: SkinnyGemmConfig, block: tuple[int, int] | None
) -> None:
    n, k = 80, 384
    w = torch.randn(n, k) / k**0.5
    if block is None:
        q, scale = quantize(w, "fp8")
    else:
        q, blocks = quantize_blocks(w, "fp8", block)
        scale = blocks.repeat_interleave(block[0], 0)[:n].contiguous()
    group = None if block is None else block[1]
    for m in (1, 3):
        x = torch.randn(m, k)
        bias = torch.randn(n)
        got = quant_gemv(x.to(device), q.to(device), scale.to(device), group, bias.to(device), config).cpu()
        want = F.linear(x, dequantize(q, scale, group), bias)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("m", [1, 4, 70])
def test_silu_mul_in_the_loads_and_partials_left_to_the_caller(device: str, m: int) -> None:
    # down_proj's shape class (K >= 8192 splits K): silu(gate) * up made as x loads; the deferred
    # call hands back the scaled partials, which summed give the same y.
    n, k = 48, 8192
    q, scale = quantize(torch.randn(n, k) / k**0.5, "fp8")
    gate_up = torch.randn(m, 2 * k)
    bias = torch.randn(n)
    want = F.linear(F.silu(gate_up[:, :k]) * gate_up[:, k:], dequantize(q, scale), bias)
    args = (gate_up.to(device), q.to(device), scale.to(device), None, bias.to(device))
    got = quant_gemv(*args, silu_mul=True).cpu()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    deferred = quant_gemv_deferred(*args, silu_mul=True)
    if m > 16:  # row blocks give enough programs without splitting K: nothing left to sum
        assert isinstance(deferred, torch.Tensor)
        torch.testing.assert_close(deferred.cpu(), want, atol=1e-4, rtol=1e-5)
        return
    assert isinstance(deferred, SplitKPartials) and deferred.partials.shape[0] > 1
    assert deferred.bias is not None and deferred.dtype == torch.float32
    torch.testing.assert_close((deferred.partials.sum(0) + deferred.bias).cpu(), want, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="silu_mul=True"):
        quant_gemv(gate_up[:, :k].to(device), q.to(device), scale.to(device), None, silu_mul=True)


@pytest.mark.parametrize("split_k", [1, 3])
def test_row_blocks_with_split_partials(device: str, split_k: int) -> None:
    # Several row blocks and K splits at once: each block's rows land in their own rows of y (and
    # of the partials), none overwritten by a neighbour block's ragged tail.
    m, n, k = 45, 40, 384
    q, scale = quantize(torch.randn(n, k) / k**0.5, "int8")
    x = torch.randn(m, k)
    config = SkinnyGemmConfig(block_n=16, block_k=64, split_k=split_k, block_m=16)
    got = quant_gemv(x.to(device), q.to(device), scale.to(device), None, None, config).cpu()
    torch.testing.assert_close(got, F.linear(x, dequantize(q, scale)), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(
    "config",
    [
        None,  # quant_gemv's pick: K unsplit
        SkinnyGemmConfig(block_n=16, block_k=128, split_k=3, use_dot=False),  # ragged last split
        SkinnyGemmConfig(block_n=32, block_k=256, num_warps=4, use_dot=False),  # ragged row block
    ],
)
@pytest.mark.parametrize("group", [None, 128])
@pytest.mark.parametrize("convert", ["magic", "magic_asm"])  # magic_asm: its Triton form on CPU
def test_int8_conversions_give_the_same_bits(
    device: str, convert: Int8Convert, config: SkinnyGemmConfig | None, group: int | None
) -> None:
    # The one-row GEMV (tensor-core dots always take "cvt"): every int8 value in every row, and a
    # ragged N and K, so masked tiles convert too.
    n, k = 70, 640 - 24
    q = torch.stack(
        [torch.arange(-128, 128, dtype=torch.int8).repeat(3)[torch.randperm(768)][:k] for _ in range(n)]
    )
    scale = torch.rand(n, 1 if group is None else -(-k // group)) / 64
    x = torch.randn(1, k).to(torch.bfloat16)
    args = (x.to(device), q.to(device), scale.to(device), group, None, config)
    want = quant_gemv(*args).cpu()
    got = quant_gemv(*args, tuning=replace(DEFAULT_TUNING, int8_convert=convert)).cpu()
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_refuses_what_it_cannot_take() -> None:
    x = torch.randn(17, 64)
    assert quant_gemv_fits(x, None)
    assert not quant_gemv_fits(x[:2], 64)  # a scale group narrower than the kernel's K step
    assert not quant_gemv_fits(x[None], None)
    q, scale = quantize(torch.randn(8, 64), "int8")
    with pytest.raises(ValueError, match="groups of 128k columns"):
        quant_gemv(x, q, scale, 64)
    with pytest.raises(ValueError, match="do not fit"):
        quant_gemv(x[:2, :32], q, scale, None)


def _pending_merge(splits: int, dtype: torch.dtype, heads: int = 6, head_dim: int = 64) -> PendingMerge:
    # One decode token's attention partials [1, heads, splits, head_dim] as the attention kernel
    # leaves them: a split without keys (log-sum-exp -inf), and a head with none at all.
    partials = torch.randn(1, heads, splits, head_dim)
    lse = torch.randn(1, heads, splits) * 3
    lse[0, 1, splits - 1] = float("-inf")
    lse[0, 4] = float("-inf")
    return PendingMerge(partials, lse, dtype)


def _merged(pending: PendingMerge) -> torch.Tensor:
    # The merge kernel's [1, heads * head_dim] in the activations' dtype: the unfused path.
    _, heads, _, head_dim = pending.partials.shape
    out = torch.empty(1, heads, head_dim, dtype=pending.dtype, device=pending.partials.device)
    return pending.merge_into(out).flatten(1)


def _on(device: str, pending: PendingMerge) -> PendingMerge:
    return PendingMerge(pending.partials.to(device), pending.lse.to(device), pending.dtype)


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits", [2, 5, 16])
@pytest.mark.parametrize(
    "config",
    [
        None,  # the merging one-row shape: CudaTuning.merge_block_n rows a program, K unsplit
        SkinnyGemmConfig(block_n=16, block_k=256, use_dot=False),  # K = 384: a ragged (masked) step
        SkinnyGemmConfig(block_n=16, block_k=128, split_k=2, use_dot=False),  # ragged last split
        SkinnyGemmConfig(block_n=32, block_k=64, split_k=3, use_dot=False, num_warps=8),  # even splits
    ],
)
def test_merges_the_attention_partials_it_loads(
    device: str, fmt: str, dtype: torch.dtype, splits: int, config: SkinnyGemmConfig | None
) -> None:
    # o_proj at one decode token: the partials merged in the loads give the bits of the merge
    # kernel's output through the same launch, summed here or left to the next norm.
    n, k = 80, 6 * 64
    q, scale = quantize(torch.randn(n, k) / k**0.5, fmt)
    bias = torch.randn(n).to(dtype)
    pending = _on(device, _pending_merge(splits, dtype))
    merged = _merged(pending)
    plain = config or replace(quant_gemv_config(1, n, k), block_n=DEFAULT_TUNING.merge_block_n)
    args = (q.to(device), scale.to(device), None, bias.to(device))
    got = quant_gemv(pending, *args, config)
    assert got.dtype == dtype and got.shape == (1, n)
    assert torch.equal(got, quant_gemv(merged, *args, plain))
    deferred = quant_gemv_deferred(pending, *args, config)
    want = quant_gemv_deferred(merged, *args, plain)
    if isinstance(want, torch.Tensor):
        assert isinstance(deferred, torch.Tensor) and torch.equal(deferred, want)
    else:
        assert (
            isinstance(deferred, SplitKPartials) and deferred.partials.shape[0] == want.partials.shape[0] > 1
        )
        assert torch.equal(deferred.partials, want.partials) and deferred.dtype == dtype
    reference = F.linear(merged.float().cpu(), dequantize(q, scale), bias.float())
    torch.testing.assert_close(got.float().cpu(), reference, atol=1e-4, rtol=_RTOL[dtype])


@pytest.mark.parametrize("convert", ["cvt", "magic", "magic_asm"])
def test_int8_conversions_merge_alike(device: str, convert: Int8Convert) -> None:
    # CudaTuning.int8_convert in the merging GEMV: every conversion, the bits of the unfused path.
    n, k = 40, 6 * 64
    q, scale = quantize(torch.randn(n, k) / k**0.5, "int8")
    pending = _on(device, _pending_merge(4, torch.bfloat16))
    tuning = replace(DEFAULT_TUNING, int8_convert=convert)
    config = replace(quant_gemv_config(1, n, k), block_n=DEFAULT_TUNING.merge_block_n)
    args = (q.to(device), scale.to(device), None)
    want = quant_gemv(_merged(pending), *args, config=config)  # "magic_asm" is the default
    assert torch.equal(quant_gemv(pending, *args, tuning=tuning), want)


def test_merging_launch_takes_the_tunings_split(device: str) -> None:
    # Llama-3-8B's o_proj input (32 heads of 128): K unsplit by default; CudaTuning.merge_split_k
    # splits it, and the deferred call leaves those partials, as skinny_gemm's merging GEMM does.
    n, k = 32, 32 * 128
    q, scale = quantize(torch.randn(n, k) / k**0.5, "fp8")
    q, scale = q.to(device), scale.to(device)
    pending = _on(device, _pending_merge(2, torch.bfloat16, heads=32, head_dim=128))
    merged = _merged(pending)
    assert isinstance(quant_gemv_deferred(pending, q, scale, None), torch.Tensor)
    tuning = replace(DEFAULT_TUNING, merge_split_k=4)
    deferred = quant_gemv_deferred(pending, q, scale, None, tuning=tuning)
    assert isinstance(deferred, SplitKPartials) and deferred.partials.shape[0] == 4
    config = replace(quant_gemv_config(1, n, k), block_n=DEFAULT_TUNING.merge_block_n, split_k=4)
    want = quant_gemv_deferred(merged, q, scale, None, None, config)
    assert isinstance(want, SplitKPartials) and torch.equal(deferred.partials, want.partials)


def test_refuses_partials_it_cannot_merge() -> None:
    n, k = 32, 6 * 64
    q, scale = quantize(torch.randn(n, k), "fp8")
    pending = _pending_merge(2, torch.bfloat16)
    assert pending.fuses_into(q, quantized=True) and not pending.fuses_into(q)
    two = PendingMerge(pending.partials.expand(2, -1, -1, -1), pending.lse.expand(2, -1, -1), torch.bfloat16)
    assert not two.fuses_into(q, quantized=True)
    with pytest.raises(ValueError, match="one-row"):
        quant_gemv(two, q, scale, None)  # two tokens
    _, blocks = quantize_blocks(torch.randn(n, k), "fp8", (32, 128))
    with pytest.raises(ValueError, match="per-row scales"):
        quant_gemv(pending, q, blocks, 128)  # grouped scales
    with pytest.raises(ValueError, match="one-row"):
        quant_gemv(pending, q, scale, None, config=SkinnyGemmConfig(block_n=16, block_k=64))  # tensor cores
    with pytest.raises(ValueError, match="one-row"):
        quant_gemv(pending, q[:, : k // 2], scale, None, silu_mul=True)
    # The fused step's rule (engine.fused_step.gemm): quantized weights fuse as bf16 ones do, up
    # to CudaTuning.merge_max_k columns (Llama-3-8B's 4,096 keep the merge kernel by default).
    from engine.fused_step import gemm

    assert gemm.fuses_into(pending, q, DEFAULT_TUNING, quantized=True)
    assert not gemm.fuses_into(pending, q, DEFAULT_TUNING)  # taken for a bf16 weight: dtypes differ
    assert not gemm.fuses_into(pending, q, replace(DEFAULT_TUNING, merge_max_k=k // 2), quantized=True)
    wide = _pending_merge(2, torch.bfloat16, heads=32, head_dim=128)
    wide_q = torch.empty(8, 32 * 128, dtype=torch.float8_e4m3fn)
    assert not gemm.fuses_into(wide, wide_q, DEFAULT_TUNING, quantized=True)
    assert gemm.fuses_into(wide, wide_q, replace(DEFAULT_TUNING, merge_max_k=4096), quantized=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_merges_at_llama3_8b_shape_on_gpu(fmt: str) -> None:
    # o_proj of Llama-3-8B (32 heads of 128, 4,096 outputs), 16 attention splits, compiled: the
    # merge in the loads gives the merge kernel's bits, unsplit and in CudaTuning.merge_split_k
    # slices, with the INT8 conversion in PTX (magic_asm, the default).
    n, k = 4096, 32 * 128
    q, scale = quantize(torch.randn(n, k) / k**0.5, fmt)
    q, scale = q.cuda(), scale.cuda()
    for dtype in (torch.bfloat16, torch.float16):
        pending = _on("cuda", _pending_merge(16, dtype, heads=32, head_dim=128))
        merged = _merged(pending)
        config = replace(quant_gemv_config(1, n, k), block_n=DEFAULT_TUNING.merge_block_n)
        assert torch.equal(
            quant_gemv(pending, q, scale, None), quant_gemv(merged, q, scale, None, None, config)
        )
        tuning = replace(DEFAULT_TUNING, merge_split_k=4)
        deferred = quant_gemv_deferred(pending, q, scale, None, tuning=tuning)
        want = quant_gemv_deferred(merged, q, scale, None, None, replace(config, split_k=4), tuning=tuning)
        assert isinstance(deferred, SplitKPartials) and isinstance(want, SplitKPartials)
        assert torch.equal(deferred.partials, want.partials)
