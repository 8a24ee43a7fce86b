"""The norm fused into the one-row GEMM after it, against the two kernels it replaces."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from engine.fused_step import gemm
from engine.fused_step.lazy import materialize
from engine.fused_step.norm import add_norm, embed_norm
from engine.kernels import (
    PendingNorm,
    SkinnyGemmConfig,
    SplitKPartials,
    TokenEmbedding,
    normed_gemv,
    rms_norm,
    rms_norm_split_k,
    skinny_gemm,
    skinny_gemm_deferred,
)
from engine.kernels.normed_gemv import ONE_TILE_MAX_K
from engine.kernels.quant_gemv import quant_gemv
from engine.layers import ColumnParallelLinear, RMSNorm, VocabParallelEmbedding
from engine.layers.quantized_linear import QuantizedLinear, quantize_linears
from engine.quantization.scheme import WeightQuant
from engine.quantization.tensors import quantize
from engine.tuning import DEFAULT_TUNING
from tests.unit.engine.kernels.kernel_launch import recorded_launches

_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _pending(x: torch.Tensor | SplitKPartials, n: int, dtype: torch.dtype, device: str) -> PendingNorm:
    weight = torch.randn(n).to(dtype).to(device)
    residual = torch.randn(1, n).to(dtype).to(device)
    return PendingNorm(x, residual, weight, 1e-6, torch.empty_like(residual))


def _unfused(
    pending: PendingNorm, w: torch.Tensor, b: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two kernels: the norm, then a one-row skinny GEMM taking the whole row as one tile."""
    out = torch.empty_like(pending.residual_out)
    h = materialize(
        PendingNorm(pending.x, pending.residual, pending.weight, pending.eps, out), DEFAULT_TUNING
    )
    block_k = 1 << (w.shape[1] - 1).bit_length()
    config = SkinnyGemmConfig(block_n=16, block_k=block_k, use_dot=False, num_warps=8)
    return skinny_gemm(h, w, b, config), out


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n_out", [48, 40])
def test_plain_input_matches_norm_then_gemm(device: str, dtype: torch.dtype, bias: bool, n_out: int) -> None:
    n = 96  # not a power of two: the row is one masked tile
    pending = _pending(torch.randn(1, n).to(dtype).to(device), n, dtype, device)
    w = (torch.randn(n_out, n) / n**0.5).to(dtype).to(device)
    b = torch.randn(n_out).to(dtype).to(device) if bias else None
    want, want_res = _unfused(pending, w, b)
    got = normed_gemv(pending, w, b)
    assert got.shape == (1, n_out) and got.dtype == dtype
    torch.testing.assert_close(pending.residual_out, want_res, rtol=0, atol=0)
    if device == "cpu":  # the interpreter reduces both the same way: the same bits
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("block_n", [16, 64])
def test_program_width_does_not_change_the_result(device: str, block_n: int) -> None:
    dtype, n = torch.bfloat16, 64
    pending = _pending(torch.randn(1, n).to(dtype).to(device), n, dtype, device)
    w = (torch.randn(72, n) / n**0.5).to(dtype).to(device)
    default = normed_gemv(pending, w)
    tuned = replace(DEFAULT_TUNING, gemv_block_n=block_n)
    torch.testing.assert_close(normed_gemv(pending, w, tuning=tuned), default, rtol=0, atol=0)


def test_float32_logits_are_the_rounded_result_widened(device: str) -> None:
    # The LM head: float32 out, rounded to the activations' dtype first (F.linear then .float()).
    dtype, n = torch.bfloat16, 64
    pending = _pending(torch.randn(1, n).to(dtype).to(device), n, dtype, device)
    w = (torch.randn(200, n) / n**0.5).to(dtype).to(device)
    narrow = normed_gemv(pending, w)
    wide = normed_gemv(pending, w, out_dtype=torch.float32)
    assert wide.dtype == torch.float32
    assert torch.equal(wide, narrow.float())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_first_layer_gathers_its_embedding_row(device: str, dtype: torch.dtype) -> None:
    n, vocab = 96, 50
    table = torch.randn(vocab, n).to(dtype).to(device)
    token = torch.tensor([37], device=device)
    norm_w = torch.randn(n).to(dtype).to(device)
    w = (torch.randn(40, n) / n**0.5).to(dtype).to(device)

    def pending() -> PendingNorm:
        return PendingNorm(
            TokenEmbedding(table, token), None, norm_w, 1e-6, torch.empty(1, n, dtype=dtype).to(device)
        )

    fused = pending()
    assert fused.fuses_into(w)
    got = normed_gemv(fused, w)
    # The residual stream is the embedding row itself; the GEMM sees its norm (no add).
    assert torch.equal(fused.residual_out, table[37:38])
    unfused = pending()
    h = materialize(unfused, DEFAULT_TUNING)  # gather, copy, norm: what a consumer that cannot fuse gets
    assert torch.equal(unfused.residual_out, table[37:38])
    assert torch.equal(h, rms_norm(table[37:38], norm_w, 1e-6)[0])
    config = SkinnyGemmConfig(block_n=16, block_k=128, use_dot=False, num_warps=8)
    want = skinny_gemm(h, w, None, config)
    if device == "cpu":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    # Another dtype's table does not fuse.
    other = PendingNorm(
        TokenEmbedding(table.float(), token), None, norm_w, 1e-6, torch.empty(1, n, dtype=dtype).to(device)
    )
    assert not other.fuses_into(w)


@pytest.mark.parametrize("split_k", [3, 4])
@pytest.mark.parametrize("producer_bias", [False, True])
def test_split_k_partials_of_the_gemm_before(device: str, split_k: int, producer_bias: bool) -> None:
    dtype, n, k_before = torch.bfloat16, 64, 96
    x_before = torch.randn(1, k_before).to(dtype).to(device)
    w_before = (torch.randn(n, k_before) / k_before**0.5).to(dtype).to(device)
    b_before = torch.randn(n).to(dtype).to(device) if producer_bias else None
    partials = skinny_gemm_deferred(
        x_before, w_before, b_before, SkinnyGemmConfig(block_n=16, block_k=16, split_k=split_k)
    )
    assert isinstance(partials, SplitKPartials)
    pending = _pending(partials, n, dtype, device)
    w = (torch.randn(32, n) / n**0.5).to(dtype).to(device)
    want, want_res = _unfused(pending, w, None)
    got = normed_gemv(pending, w)
    assert torch.equal(pending.residual_out, want_res)
    if device == "cpu":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_what_cannot_fuse_is_refused(device: str) -> None:
    dtype = torch.bfloat16
    pending = _pending(torch.randn(1, 64).to(dtype).to(device), 64, dtype, device)
    assert pending.fuses_into(torch.randn(8, 64).to(dtype).to(device))
    assert not pending.fuses_into(torch.randn(8, 32).to(dtype).to(device))  # another K
    assert not pending.fuses_into(torch.randn(8, 64).to(device))  # another dtype
    assert not pending.fuses_into(torch.randn(64, 8).to(dtype).to(device).t())  # K not contiguous
    two_rows = PendingNorm(
        torch.randn(2, 64).to(dtype), torch.randn(2, 64).to(dtype), pending.weight.cpu(), 1e-6,
        torch.empty(2, 64, dtype=dtype),
    )  # fmt: skip
    assert not two_rows.fuses_into(torch.randn(8, 64).to(dtype))


def test_fused_step_leaves_one_rows_norm_to_the_gemm_after_it(device: str) -> None:
    dtype, n = torch.bfloat16, 64
    layer = RMSNorm(n)
    layer.weight.data = torch.randn(n).to(dtype).to(device)
    x, res = torch.randn(1, n).to(dtype).to(device), torch.randn(1, n).to(dtype).to(device)
    want_h, want_res = rms_norm(x, layer.weight, layer.eps, res)
    h, summed = add_norm(layer, x, res, DEFAULT_TUNING)
    assert isinstance(h, PendingNorm) and h.residual_out is summed
    # A consumer that cannot fuse (cuBLAS here) gets the norm kernel's output and the sum.
    linear = ColumnParallelLinear(n, 32).to(dtype).to(device)
    linear.weight.data.normal_()
    got = gemm.column(linear, h, replace(DEFAULT_TUNING, skinny_gemm=False))
    torch.testing.assert_close(got, F.linear(want_h, linear.weight), rtol=0, atol=0)
    assert torch.equal(summed, want_res)
    # Two rows, or the fusion off: the norm runs at once.
    two = torch.randn(2, n).to(dtype).to(device)
    assert isinstance(add_norm(layer, two, two, DEFAULT_TUNING)[0], torch.Tensor)
    assert isinstance(add_norm(layer, x, res, replace(DEFAULT_TUNING, norm_in_gemv=False))[0], torch.Tensor)


# Rows longer than one tile (Llama-3-8B: 4,096; 70B: 8,192) are walked in chunks, twice. Their
# sum of squares is taken chunk-wise, in another order than rms_norm's one tile: the norm's scale
# may differ in its last float32 bit, so a bf16 output may move by one rounding step.
_LONG = [4096, 2600]  # a power of two, and a row whose last chunk is ragged
_CHUNK = DEFAULT_TUNING.long_row_chunk


def _input(source: str, n: int, dtype: torch.dtype, device: str) -> torch.Tensor | SplitKPartials:
    if source == "partials":  # three splits and the producer's bias, as o_proj / down leave them
        return SplitKPartials(torch.randn(3, 1, n).to(device), torch.randn(n).to(dtype).to(device), dtype)
    return torch.randn(1, n).to(dtype).to(device)


def _assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    # One bf16 rounding step; float32 to its last bits.
    rtol = 2**-7 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("n", "source"), [(96, "row"), (2600, "row"), (2600, "partials")])
def test_quantized_weight_matches_norm_then_quant_gemv(
    device: str, fmt: str, dtype: torch.dtype, bias: bool, n: int, source: str
) -> None:
    # Per-row scales: the norm fused as for bf16 weights; the product as quant_gemv's one row
    # (same float32 products, summed in one tile or chunks instead of its K steps). A row of
    # 2,600 is walked in chunks (the last one ragged).
    n_out = 40
    pending = _pending(_input(source, n, dtype, device), n, dtype, device)
    q, scale = quantize(torch.randn(n_out, n) / n**0.5, fmt)
    b = torch.randn(n_out).to(dtype).to(device) if bias else None
    out = torch.empty_like(pending.residual_out)
    h = materialize(
        PendingNorm(pending.x, pending.residual, pending.weight, pending.eps, out), DEFAULT_TUNING
    )
    want = quant_gemv(h, q.to(device), scale.to(device), None, b)
    got = normed_gemv(pending, q.to(device), b, scale=scale.to(device))
    assert got.dtype == dtype and got.shape == (1, n_out)
    torch.testing.assert_close(pending.residual_out, out, rtol=0, atol=0)
    _assert_close(got, want, dtype)
    with pytest.raises(ValueError, match="cannot fuse"):  # a quantized weight without its scales
        normed_gemv(pending, q.to(device), b)
    with pytest.raises(ValueError, match="per-row scales"):
        normed_gemv(pending, q.to(device), b, scale=scale.repeat(1, 2).to(device))


@pytest.mark.parametrize("convert", ["magic", "magic_asm"])
@pytest.mark.parametrize(("n", "source"), [(96, "row"), (2600, "row"), (2600, "partials")])
def test_int8_conversions_give_the_same_bits(device: str, convert: str, n: int, source: str) -> None:
    # CudaTuning.int8_convert (engine.kernels.int8): every way of widening INT8 weights gives
    # the I2F instruction's bits, in one tile and in chunks (ragged last one).
    pending = _pending(_input(source, n, torch.bfloat16, device), n, torch.bfloat16, device)
    q, scale = quantize(torch.randn(40, n) / n**0.5, "int8")
    q[0, : min(n, 256)] = torch.arange(-128, 128, dtype=torch.int8)[: min(n, 256)]  # every value
    q, scale = q.to(device), scale.to(device)
    tuning = replace(DEFAULT_TUNING, int8_convert=convert)
    want = normed_gemv(pending, q, scale=scale)
    got = normed_gemv(pending, q, scale=scale, tuning=tuning)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if device == "cpu":  # under the interpreter: and the kernel was asked for that conversion
        with recorded_launches() as launches:
            normed_gemv(pending, q, scale=scale, tuning=tuning)
        assert dict(launches[0].constexprs)["INT8_CONVERT"] == convert


@pytest.mark.parametrize("block", [None, (32, 64)])
def test_fused_step_fuses_norms_into_per_row_quantized_layers(
    device: str, monkeypatch: pytest.MonkeyPatch, block: tuple[int, int] | None
) -> None:
    # One row into a quantized column layer with per-row scales: normed_gemv with its scales, not
    # the norm kernel and quant_gemv. Block-scaled layers (scales per K group) materialize first.
    n = 128
    holder = torch.nn.Module()
    holder.proj = ColumnParallelLinear(n, 32, bias=False)
    norm_layer = RMSNorm(n).to(device)
    with torch.no_grad():
        holder.proj.weight.copy_(torch.randn(32, n) / n**0.5)
        norm_layer.weight.copy_(torch.rand(n) + 0.5)
    holder.to(device)
    quantize_linears(holder, WeightQuant("fp8", block=block), from_weights=True)
    quantized = holder.proj
    assert isinstance(quantized, QuantizedLinear)
    fused: list[bool] = []
    real = gemm.normed_gemv
    monkeypatch.setattr(gemm, "normed_gemv", lambda *a, **k: fused.append(True) or real(*a, **k))
    x, residual = torch.randn(1, n).to(device), torch.randn(1, n).to(device)
    pending, summed = add_norm(norm_layer, x, residual, DEFAULT_TUNING)
    assert isinstance(pending, PendingNorm)
    got = gemm.column(quantized, pending, DEFAULT_TUNING)
    want_in = materialize(
        PendingNorm(x, residual, norm_layer.weight, norm_layer.eps, torch.empty_like(x)), DEFAULT_TUNING
    )
    want = F.linear(want_in, quantized.dequantized(torch.float32))
    torch.testing.assert_close(summed, x + residual)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert fused == ([True] if block is None else [])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("n_out", [4096, 6144])
def test_real_shapes_on_gpu(n_out: int) -> None:
    # Qwen3-0.6B: hidden 1,024; o_proj's partials (split 4) into gate_up / qkv.
    dtype, n = torch.bfloat16, 1024
    x_before = torch.randn(1, 2048, dtype=dtype, device="cuda")
    w_before = torch.randn(n, 2048, dtype=dtype, device="cuda") / 2048**0.5
    partials = skinny_gemm_deferred(x_before, w_before)
    assert isinstance(partials, SplitKPartials)
    pending = _pending(partials, n, dtype, "cuda")
    w = torch.randn(n_out, n, dtype=dtype, device="cuda") / n**0.5
    want, want_res = _unfused(pending, w, None)
    got = normed_gemv(pending, w)
    assert torch.equal(pending.residual_out, want_res)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_lm_head_shape_of_the_final_norm_on_gpu() -> None:
    # Qwen3-0.6B's head: 151,936 x 1,024, tied to the embeddings; float32 logits either way.
    dtype, n, vocab = torch.bfloat16, 1024, 151936
    weight = (torch.randn(vocab, n, device="cuda") * n**-0.5).to(dtype)
    pending = _pending(torch.randn(1, n, dtype=dtype, device="cuda"), n, dtype, "cuda")
    t = DEFAULT_TUNING
    fused = normed_gemv(pending, weight, out_dtype=torch.float32, block_n=t.lm_head_block_n,
                        num_warps=t.lm_head_warps)  # fmt: skip
    assert fused.dtype == torch.float32 and fused.shape == (1, vocab)
    unfused = F.linear(materialize(pending, t), weight)
    torch.testing.assert_close(fused, unfused.float(), rtol=1e-2, atol=1e-2)
    assert fused.argmax() == unfused.float().argmax()


@pytest.mark.parametrize("n", _LONG)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("source", ["row", "partials"])
def test_long_rows_match_norm_then_gemm(device: str, n: int, dtype: torch.dtype, source: str) -> None:
    assert n > ONE_TILE_MAX_K
    pending = _pending(_input(source, n, dtype, device), n, dtype, device)
    w = (torch.randn(40, n) / n**0.5).to(dtype).to(device)
    b = torch.randn(40).to(dtype).to(device)
    assert pending.fuses_into(w)
    got = normed_gemv(pending, w, b)
    # The two kernels, the GEMM walking K in the same chunks (its products summed per chunk).
    out = torch.empty_like(pending.residual_out)
    h = materialize(
        PendingNorm(pending.x, pending.residual, pending.weight, pending.eps, out), DEFAULT_TUNING
    )
    want = skinny_gemm(h, w, b, SkinnyGemmConfig(block_n=16, block_k=_CHUNK, use_dot=False, num_warps=8))
    assert got.shape == (1, 40) and got.dtype == dtype
    assert torch.equal(pending.residual_out, out)  # the residual stream: the same bits
    _assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_first_layer_gathers_its_embedding_row(device: str, dtype: torch.dtype) -> None:
    n, vocab = 4096, 20
    table = torch.randn(vocab, n).to(dtype).to(device)
    norm_w = torch.randn(n).to(dtype).to(device)
    w = (torch.randn(24, n) / n**0.5).to(dtype).to(device)
    fused = PendingNorm(
        TokenEmbedding(table, torch.tensor([13], device=device)), None, norm_w, 1e-6,
        torch.empty(1, n, dtype=dtype).to(device),
    )  # fmt: skip
    got = normed_gemv(fused, w)
    assert torch.equal(fused.residual_out, table[13:14])
    h = rms_norm(table[13:14], norm_w, 1e-6)[0]
    want = skinny_gemm(h, w, None, SkinnyGemmConfig(block_n=16, block_k=_CHUNK, use_dot=False, num_warps=8))
    _assert_close(got, want, dtype)


def test_long_rows_program_shape_does_not_change_the_result(device: str) -> None:
    dtype, n = torch.bfloat16, 2600
    pending = _pending(torch.randn(1, n).to(dtype).to(device), n, dtype, device)
    w = (torch.randn(72, n) / n**0.5).to(dtype).to(device)
    default = normed_gemv(pending, w)
    for tuned in (
        replace(DEFAULT_TUNING, long_row_block_n=64, long_row_warps=4),
        replace(DEFAULT_TUNING, long_row_block_n=16),
    ):
        torch.testing.assert_close(normed_gemv(pending, w, tuning=tuned), default, rtol=0, atol=0)
    # Another chunk sums in another order: close, not necessarily the same bits.
    _assert_close(normed_gemv(pending, w, tuning=replace(DEFAULT_TUNING, long_row_chunk=256)), default, dtype)


def test_long_row_lm_head_writes_the_rounded_logits_widened(device: str) -> None:
    # The final norm inside the LM head: float32 logits, rounded to the activations' dtype first.
    dtype, n = torch.bfloat16, 4096
    pending = _pending(_input("partials", n, dtype, device), n, dtype, device)
    head = (torch.randn(100, n) / n**0.5).to(dtype).to(device)
    narrow = normed_gemv(pending, head)
    wide = normed_gemv(pending, head, out_dtype=torch.float32)
    assert wide.dtype == torch.float32 and torch.equal(wide, narrow.float())
    assert pending.residual is not None and isinstance(pending.x, SplitKPartials)
    h = rms_norm_split_k(pending.x, pending.weight, pending.eps, pending.residual)[0]
    torch.testing.assert_close(
        wide, F.linear(h.float(), head.float()).to(dtype).float(), rtol=2**-7, atol=1e-3
    )


def test_the_widest_fused_row_is_the_tunings_choice(device: str) -> None:
    # Llama-3-8B's hidden size: left to the GEMM after it with the limit at 8,192; at 1,024 (the
    # one-tile rows only, the default until the chunked rows are timed on a GPU) the norm kernel
    # runs at once.
    dtype, n = torch.bfloat16, 4096
    layer = RMSNorm(n).to(dtype).to(device)
    x, res = torch.randn(1, n).to(dtype).to(device), torch.randn(1, n).to(dtype).to(device)
    wide, narrow = replace(DEFAULT_TUNING, norm_in_gemv_max_k=8192), DEFAULT_TUNING
    assert DEFAULT_TUNING.norm_in_gemv_max_k == 1024
    assert isinstance(add_norm(layer, x, res, wide)[0], PendingNorm)
    assert isinstance(add_norm(layer, x, res, narrow)[0], torch.Tensor)
    embedding = VocabParallelEmbedding(20, n).to(dtype).to(device)
    with torch.no_grad():  # made with torch.empty: whatever the memory held, inf included
        embedding.weight.normal_()
    token = torch.tensor([3], device=device)
    assert isinstance(embed_norm(embedding, layer, token, wide)[0], PendingNorm)
    h, x0 = embed_norm(embedding, layer, token, narrow)
    assert isinstance(h, torch.Tensor) and torch.equal(x0, embedding.weight[3:4])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("n_out", [6144, 28672])
@pytest.mark.parametrize("fmt", [None, "fp8", "int8"])
def test_llama_8b_rows_on_gpu(n_out: int, fmt: str | None) -> None:
    # Llama-3-8B: hidden 4,096 (chunked); qkv and gate_up after o_proj's / down's split partials.
    dtype, n = torch.bfloat16, 4096
    partials = SplitKPartials(torch.randn(2, 1, n, device="cuda"), None, dtype)
    pending = _pending(partials, n, dtype, "cuda")
    w = torch.randn(n_out, n, device="cuda") / n**0.5
    out = torch.empty_like(pending.residual_out)
    h = materialize(
        PendingNorm(pending.x, pending.residual, pending.weight, pending.eps, out), DEFAULT_TUNING
    )
    if fmt is None:
        want = F.linear(h, w.to(dtype))
        got = normed_gemv(pending, w.to(dtype))
    else:
        q, scale = quantize(w, fmt)
        want = quant_gemv(h, q, scale, None)
        got = normed_gemv(pending, q, scale=scale)
    assert torch.equal(pending.residual_out, out)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
