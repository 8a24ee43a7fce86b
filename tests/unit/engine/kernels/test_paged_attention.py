"""The Triton paged attention against the torch backend, over the pool's real strided views."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.attention_backends import AttentionMetadata, TorchAttentionBackend, TritonAttentionBackend
from engine.attention_backends.triton_backend import num_splits_for
from engine.kernels import paged_attention
from engine.quantization.kv_quant import KVScales, quantize_kv
from engine.tuning import DEFAULT_TUNING
from tests.unit.engine.kernels.kernel_launch import recorded_launches

_TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _case(
    device: str,
    dtype: torch.dtype,
    *,
    heads: tuple[int, int, int],
    block_size: int,
    q_lens: list[int],
    ctx_lens: list[int],
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    num_heads, num_kv_heads, head_dim = heads
    g = torch.Generator().manual_seed(seed)
    pages = [-(-c // block_size) for c in ctx_lens]
    num_blocks = sum(pages) + 3
    # The pool's layout: [num_blocks, L, 2, B, H, D]; the test uses layer 1, so strides are real.
    pool = torch.randn(num_blocks, 2, 2, block_size, num_kv_heads, head_dim, generator=g)
    pool = pool.to(dtype).to(device)
    k_cache, v_cache = pool[:, 1, 0], pool[:, 1, 1]
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables, used = [], 0
    for n in pages:
        tables.append(order[used : used + n] + [0] * (max(pages) - n))
        used += n
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    q = torch.randn(starts[-1], num_heads, head_dim, generator=g).to(dtype).to(device)

    def ints(values: list[int] | list[list[int]], dt: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dt, device=device)

    meta = AttentionMetadata(
        slot_mapping=ints([0] * starts[-1], torch.long),
        block_tables=ints(tables, torch.int32),
        context_lens=ints(ctx_lens, torch.int32),
        query_starts=ints(starts, torch.int32),
        block_size=block_size,
        host_query_starts=tuple(starts),
        host_context_lens=tuple(ctx_lens),
    )
    return q, k_cache, v_cache, meta


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert not got.isnan().any()
    err = (got.double() - want.double()).norm() / want.double().norm()
    assert err < _TOL[dtype], f"relative error {err:.2e}"


def _compare(device: str, dtype: torch.dtype, window: int | None = None, **case: object) -> None:
    q, k_cache, v_cache, meta = _case(device, dtype, **case)  # type: ignore[arg-type]
    scale = q.shape[-1] ** -0.5
    want = TorchAttentionBackend().forward(q, k_cache, v_cache, meta, scale=scale, sliding_window=window)
    got = TritonAttentionBackend().forward(q, k_cache, v_cache, meta, scale=scale, sliding_window=window)
    _check(got, want, dtype)


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_decode_matches_torch_for_every_split(device: str, splits: int) -> None:
    q, k_cache, v_cache, meta = _case(
        device, torch.float32, heads=(4, 2, 16), block_size=4, q_lens=[1, 1, 1], ctx_lens=[5, 17, 70], seed=1
    )
    want = TorchAttentionBackend().forward(q, k_cache, v_cache, meta, scale=0.25)
    got = paged_attention(
        q, k_cache, v_cache, meta.block_tables, meta.context_lens, meta.query_starts,
        max_query_len=1, scale=0.25, num_splits=splits,
    )  # fmt: skip
    _check(got, want, torch.float32)


@pytest.mark.parametrize("prefetch", [True, False])
def test_first_tile_prefetch_matches(device: str, prefetch: bool) -> None:
    tuning = replace(DEFAULT_TUNING, prefetch_small_batch=prefetch)
    # Contexts shorter than a split, ending mid-tile and on a tile edge; one empty (a padding row).
    q, k_cache, v_cache, meta = _case(
        device, torch.float32, heads=(8, 2, 16), block_size=4, q_lens=[1] * 5,
        ctx_lens=[1, 31, 32, 33, 150], seed=9,
    )  # fmt: skip
    meta.context_lens[0] = 0
    want = TorchAttentionBackend().forward(q, k_cache, v_cache, meta, scale=0.25)
    for splits in (1, 2, 16):
        got = paged_attention(
            q, k_cache, v_cache, meta.block_tables, meta.context_lens, meta.query_starts,
            max_query_len=1, scale=0.25, num_splits=splits, tuning=tuning,
        )  # fmt: skip
        _check(got[1:], want[1:], torch.float32)
        assert (got[0] == 0).all()  # no keys: zeros


def test_decode_batch_takes_the_wide_tile(device: str) -> None:
    # 16+ decode sequences take 64-key tiles; contexts shorter than, equal to and past one tile.
    ctx_lens = [1, 3, 63, 64, 65, 100, 129, 7, 30, 64, 2, 90, 17, 128, 5, 70]
    _compare(
        device, torch.float32, heads=(4, 2, 16), block_size=8, q_lens=[1] * 16, ctx_lens=ctx_lens, seed=4
    )


def test_prefill_and_extend_with_a_cached_prefix(device: str) -> None:
    # seq 0: plain prefill; seq 1: decode; seq 2: 12 new tokens after 18 cached ones.
    _compare(
        device, torch.float32, heads=(4, 2, 16), block_size=4, q_lens=[7, 1, 12], ctx_lens=[7, 9, 30], seed=2
    )


def test_sliding_window(device: str) -> None:
    _compare(
        device, torch.float32, 5, heads=(4, 2, 16), block_size=4, q_lens=[9, 1], ctx_lens=[9, 23], seed=3
    )


@pytest.mark.parametrize("heads", [(2, 2, 32), (8, 2, 16), (3, 1, 24)])
def test_group_sizes_and_odd_head_dim(device: str, heads: tuple[int, int, int]) -> None:
    _compare(device, torch.float32, heads=heads, block_size=8, q_lens=[3, 1], ctx_lens=[3, 20], seed=4)


def test_long_prefill_spans_several_query_tiles(device: str) -> None:
    _compare(device, torch.float32, heads=(4, 2, 16), block_size=16, q_lens=[70], ctx_lens=[75], seed=5)


def test_half_precision(device: str) -> None:
    for dtype in (torch.float16, torch.bfloat16):
        _compare(device, dtype, heads=(4, 2, 16), block_size=4, q_lens=[1, 5], ctx_lens=[13, 5], seed=6)


def _fp8(k_cache: torch.Tensor, v_cache: torch.Tensor, scales: KVScales) -> tuple[torch.Tensor, torch.Tensor]:
    # The same pages quantized, in a float8 pool of the same layout (layer 1 of 2, real strides).
    pool = torch.empty(
        k_cache.shape[0], 2, 2, *k_cache.shape[1:], dtype=torch.float8_e4m3fn, device=k_cache.device
    )
    pool[:, 1, 0] = quantize_kv(k_cache, scales.k)
    pool[:, 1, 1] = quantize_kv(v_cache, scales.v)
    return pool[:, 1, 0], pool[:, 1, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scales", [KVScales(), KVScales(0.25, 4.0)])
def test_fp8_cache_matches_the_torch_backend(device: str, dtype: torch.dtype, scales: KVScales) -> None:
    # Prefill, decode and an extend in one batch, then decode alone with every split count.
    for q_lens, ctx_lens, splits in (([7, 1, 12], [7, 9, 30], [1]), ([1, 1, 1], [5, 17, 70], [1, 2, 4])):
        q, k_cache, v_cache, meta = _case(
            device, dtype, heads=(4, 2, 16), block_size=4, q_lens=q_lens, ctx_lens=ctx_lens, seed=8
        )
        k8, v8 = _fp8(k_cache, v_cache, scales)
        want = TorchAttentionBackend().forward(q, k8, v8, meta, scale=0.25, scales=scales)
        # What the torch backend dequantized to: the FP8 cache really is what was read.
        unscaled = TorchAttentionBackend().forward(q, k8.to(dtype), v8.to(dtype), meta, scale=0.25)
        assert not torch.allclose(want, unscaled) or scales == KVScales()
        for num_splits in splits:
            got = paged_attention(
                q, k8, v8, meta.block_tables, meta.context_lens, meta.query_starts,
                max_query_len=max(q_lens), scale=0.25, num_splits=num_splits, scales=scales,
            )  # fmt: skip
            _check(got, want, dtype)


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="records interpreted launches: on a GPU no kernel is interpreted"
)
def test_an_fp8_cache_dots_in_f16_under_16_bit_activations_only() -> None:
    # f16 dots lose float32 activations' precision (1.7e-4 relative error against the torch
    # backend, over its 1e-4 bound, on the H200 and under the interpreter alike).
    for dtype, f16 in ((torch.bfloat16, True), (torch.float16, True), (torch.float32, False)):
        q, k_cache, v_cache, meta = _case(
            "cpu", dtype, heads=(4, 2, 16), block_size=4, q_lens=[1, 1], ctx_lens=[5, 9], seed=3
        )
        k8, v8 = _fp8(k_cache, v_cache, KVScales())
        with recorded_launches() as launches:
            paged_attention(q, k8, v8, meta.block_tables, meta.context_lens, meta.query_starts,
                            max_query_len=1, scale=0.25)  # fmt: skip
        (launch,) = [launch for launch in launches if launch.name == "_attention_kernel"]
        constexprs = dict(launch.constexprs)
        # Under the interpreter the f16 dots run too (numpy has them), not a float32 stand-in.
        assert constexprs["DOT_F16"] is f16 and constexprs["UPCAST"] is not f16


def test_a_plain_cache_ignores_kv_scales(device: str) -> None:
    # Scales describe FP8 entries; a bf16 / fp32 cache holds K and V themselves.
    q, k_cache, v_cache, meta = _case(
        device, torch.float32, heads=(4, 2, 16), block_size=4, q_lens=[3, 1], ctx_lens=[3, 9], seed=10
    )
    args = (q, k_cache, v_cache, meta.block_tables, meta.context_lens, meta.query_starts)
    want = paged_attention(*args, max_query_len=3, scale=0.25)
    got = paged_attention(*args, max_query_len=3, scale=0.25, scales=KVScales(0.5, 2.0))
    assert torch.equal(got, want)


def test_rejects_bad_arguments(device: str) -> None:
    q, k_cache, v_cache, meta = _case(
        device, torch.float32, heads=(4, 2, 16), block_size=4, q_lens=[1], ctx_lens=[5], seed=7
    )
    args = (k_cache, v_cache, meta.block_tables, meta.context_lens, meta.query_starts)
    with pytest.raises(ValueError, match="power of two"):
        paged_attention(q, *args, max_query_len=1, scale=1.0, num_splits=3)
    with pytest.raises(ValueError, match="contiguous"):
        paged_attention(q.transpose(1, 2), *args, max_query_len=1, scale=1.0)
    with pytest.raises(ValueError, match=r"KV cache of torch\.float32 for queries of torch\.float16"):
        paged_attention(q.half(), *args, max_query_len=1, scale=1.0)


def test_split_count_depends_only_on_batch_shape() -> None:
    assert num_splits_for(1, 8, 1) == 16
    assert num_splits_for(64, 8, 1) == 2
    assert num_splits_for(128, 8, 1) == 1
    assert num_splits_for(8, 8, 1) == 16
    assert num_splits_for(48, 8, 1) == 4
    assert num_splits_for(1, 8, 128) == 1
    assert num_splits_for(1, 8, 1, small_batch_max_splits=4) == 4  # the small-batch cap
    assert num_splits_for(16, 8, 1, small_batch_max_splits=4) == 8  # not applied from 16 sequences


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("heads", [(16, 8, 128), (32, 8, 128)])
def test_real_shapes_on_gpu(heads: tuple[int, int, int]) -> None:
    decode = {"q_lens": [1] * 8, "ctx_lens": [1, 17, 128, 700, 1500, 2049, 3000, 4096]}
    mixed = {"q_lens": [512, 1, 300, 64], "ctx_lens": [512, 900, 1324, 64]}
    for dtype in (torch.bfloat16, torch.float16):
        for shape in (decode, mixed):
            _compare("cuda", dtype, heads=heads, block_size=16, seed=8, **shape)  # type: ignore[arg-type]


def _fp8_words_case(device: str, widen_asm: bool, heads: tuple[int, int, int], **shape: list[int]) -> None:
    # head_dim 64 or more with the pool's strides: the tiles load as int32 words
    # (CudaTuning.fp8_kv_widen_asm) or as bytes, against the torch backend.
    q, k_cache, v_cache, meta = _case(device, torch.bfloat16, heads=heads, block_size=16, seed=9, **shape)  # type: ignore[arg-type]
    scales = KVScales(0.5, 2.0)
    k8, v8 = _fp8(k_cache, v_cache, scales)
    want = TorchAttentionBackend().forward(q, k8, v8, meta, scale=0.1, scales=scales)
    got = paged_attention(
        q, k8, v8, meta.block_tables, meta.context_lens, meta.query_starts,
        max_query_len=max(shape["q_lens"]), scale=0.1, num_splits=1, scales=scales,
        tuning=replace(DEFAULT_TUNING, fp8_kv_widen_asm=widen_asm),
    )  # fmt: skip
    _check(got, want, torch.bfloat16)


@pytest.mark.parametrize("widen_asm", [True, False])
def test_fp8_cache_read_as_words(device: str, widen_asm: bool) -> None:
    # A decode batch under 16 sequences, one over, and a mixed batch (regression: the words'
    # values came out in the order 0, 2, 1, 3 on the H200).
    for shape in (
        {"q_lens": [1] * 3, "ctx_lens": [1, 17, 70]},
        {"q_lens": [1] * 17, "ctx_lens": [5 * i + 1 for i in range(17)]},
        {"q_lens": [20, 1, 9], "ctx_lens": [20, 33, 40]},
    ):
        _fp8_words_case(device, widen_asm, (4, 2, 64), **shape)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("widen_asm", [True, False])
def test_fp8_cache_at_real_shapes_on_gpu(widen_asm: bool) -> None:
    small = {"q_lens": [1] * 8, "ctx_lens": [1, 17, 128, 700, 1500, 2049, 3000, 4096]}
    large = {"q_lens": [1] * 40, "ctx_lens": [37 * i + 1 for i in range(40)]}
    mixed = {"q_lens": [512, 1, 300, 64], "ctx_lens": [512, 900, 1324, 64]}
    for shape in (small, large, mixed):
        _fp8_words_case("cuda", widen_asm, (16, 8, 128), **shape)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_block_offsets_past_two_to_the_31_on_gpu() -> None:
    # Regression: a 5 GiB pool (Qwen3-0.6B's 28-layer blocks) puts block 2900's offset past 2**31
    # elements; int32 offset arithmetic read out of bounds (illegal address at full throughput scale).
    num_blocks, block_size, kv_heads, head_dim = 3000, 16, 8, 128
    pool = torch.randn(num_blocks, 28, 2, block_size, kv_heads, head_dim, dtype=torch.bfloat16, device="cuda")
    k_cache, v_cache = pool[:, 27, 0], pool[:, 27, 1]
    assert (num_blocks - 1) * k_cache.stride(0) > 2**31
    tables = torch.tensor([[2999, 2998, 5], [2950, 0, 0]], dtype=torch.int32, device="cuda")
    ctx = torch.tensor([40, 9], dtype=torch.int32, device="cuda")
    q = torch.randn(2, 16, head_dim, dtype=torch.bfloat16, device="cuda")
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(2, dtype=torch.long, device="cuda"),
        block_tables=tables,
        context_lens=ctx,
        query_starts=torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda"),
        block_size=block_size,
        host_query_starts=(0, 1, 2),
        host_context_lens=(40, 9),
    )
    want = TorchAttentionBackend().forward(q, k_cache, v_cache, meta, scale=0.1)
    got = TritonAttentionBackend().forward(q, k_cache, v_cache, meta, scale=0.1)
    _check(got, want, torch.bfloat16)
