"""The kernel variants our wrappers launch compile for an H200 (CUDA sm_90), without a GPU.

The CPU kernel tests run the interpreter, which never runs Triton's compiler, so a kernel it
rejects ships green (an FP8 KV-cache write once returned fp8 from one branch of a helper and bf16
from the other: every FP8 cache write failed on the H200). Here each wrapper is called on
``torch.empty`` tensors of real model sizes (they pick the tiles, splits and paths a model's
decode and prefill take), for both GPU activation dtypes and both KV-cache kinds; its launches
are recorded (``kernel_launch``), made what a CUDA launch passes, with PDL off and on, and the
``covering`` ones (every value, and every pair of paths, of each kernel: compiling all of them
takes minutes) compiled for Hopper in child processes (``hopper_compiler``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

import engine.kernels
from engine.kernels import (
    NewTokenRope,
    PendingMerge,
    PendingNorm,
    SkinnyGemmConfig,
    TokenEmbedding,
    decode_attention,
    gumbel_argmax,
    kv_write,
    normed_gemv,
    paged_attention,
    rms_norm,
    rms_norm_split_k,
    rotary,
    rotary_kv_write,
    silu_and_mul,
    skinny_gemm,
    skinny_gemm_deferred,
)
from engine.kernels.normed_gemv import ONE_TILE_MAX_K
from engine.kernels.quant_gemv import quant_gemv, quant_gemv_deferred
from engine.kernels.skinny_gemm import SplitKPartials
from engine.kernels.step_advance import step_advance
from engine.kernels.token_bitmask import apply_token_bitmask
from engine.quantization.kv_quant import KVScales
from engine.tuning import DEFAULT_TUNING
from tests.unit.engine.kernels.bad_asm import bad_asm_kernel
from tests.unit.engine.kernels.hopper_compiler import compile_for_hopper
from tests.unit.engine.kernels.kernel_launch import KernelLaunch, covering, on_hopper, recorded_launches
from tests.unit.engine.kernels.two_returns import store_kernel

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a GPU the kernel tests compile every kernel they run"
)

# A small dense model's decode and prefill (Qwen3-0.6B: hidden 1,024, 16 query and 8 KV heads of
# 128, MLP 3,072, vocabulary 151,936), a 16-token KV block, and an 8B model's wide GEMMs.
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB, BLOCK = 1024, 16, 8, 128, 3072, 151936, 16
QKV = (HEADS + 2 * KV_HEADS) * HEAD_DIM
FP8 = torch.float8_e4m3fn
Driver = Callable[[torch.dtype], None]


def _empty(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype)


def _ints(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype)


def _gumbel_argmax(dtype: torch.dtype) -> None:
    # Logits come from the fused LM head as float32, or in the activations' dtype.
    for logits in (_empty(4, VOCAB), _empty(4, VOCAB, dtype=dtype)):
        gumbel_argmax(logits, _empty(4), seed=7)


def _token_bitmask(dtype: torch.dtype) -> None:
    for logits in (_empty(4, VOCAB), _empty(4, VOCAB, dtype=dtype)):
        apply_token_bitmask(logits, _ints(2, -(-VOCAB // 32)), _ints(2))


def _step_advance(dtype: torch.dtype) -> None:
    # (Its argmax keys: engine.kernels.argmax.) The greedy tail's logits are float32 (the LM head's).
    rows, longs = 4, torch.int64
    step_advance(_empty(rows, VOCAB), _ints(rows), _ints(rows, dtype=longs), _ints(rows, dtype=longs),
                 _ints(rows, dtype=longs), _ints(rows), _ints(rows, dtype=longs), _ints(rows, 64), BLOCK)  # fmt: skip


def _rms_norm(dtype: torch.dtype) -> None:
    w = _empty(HIDDEN, dtype=dtype)
    for rows in ((7, HIDDEN), (7, HEADS, HEAD_DIM)):
        x = _empty(*rows, dtype=dtype)
        rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6, residual=_empty(*rows, dtype=dtype))
    for bias in (None, _empty(HIDDEN, dtype=dtype)):
        partials = SplitKPartials(_empty(4, 3, HIDDEN), bias, dtype)
        rms_norm_split_k(partials, w, 1e-6, _empty(3, HIDDEN, dtype=dtype))


def _silu_and_mul(dtype: torch.dtype) -> None:
    silu_and_mul(_empty(7, 2 * MLP, dtype=dtype))


def _normed_gemv(dtype: torch.dtype) -> None:
    # Qwen3-0.6B's rows (one tile) and Llama-3-8B's (hidden 4,096: walked in chunks).
    for hidden, qkv, gate_up, vocab in ((HIDDEN, QKV, 2 * MLP, VOCAB), (4096, 6144, 28672, 128256)):
        norm_w, out = _empty(hidden, dtype=dtype), _empty(1, hidden, dtype=dtype)
        row = _empty(1, hidden, dtype=dtype)
        embedding = TokenEmbedding(_empty(vocab, hidden, dtype=dtype), _ints(1, dtype=torch.int64))
        for x, residual in (
            (row, row),
            (SplitKPartials(_empty(4, 1, hidden), None, dtype), row),
            (SplitKPartials(_empty(4, 1, hidden), _empty(hidden, dtype=dtype), dtype), row),
            (embedding, None),
        ):
            pending = PendingNorm(x, residual, norm_w, 1e-6, out)
            normed_gemv(pending, _empty(qkv, hidden, dtype=dtype), _empty(qkv, dtype=dtype))
            normed_gemv(pending, _empty(gate_up, hidden, dtype=dtype))
            # FP8 / INT8 weights with per-row scales.
            for weight_dtype in (FP8, torch.int8):
                w = _empty(qkv, hidden, dtype=weight_dtype)
                normed_gemv(pending, w, _empty(qkv, dtype=dtype), scale=_empty(qkv, 1))
                normed_gemv(pending, w, scale=_empty(qkv, 1))
            # INT8 through a float's mantissa, in Triton and in PTX (CudaTuning.int8_convert).
            for convert in ("magic", "magic_asm"):
                tuning = replace(DEFAULT_TUNING, int8_convert=convert)
                w = _empty(qkv, hidden, dtype=torch.int8)
                normed_gemv(pending, w, scale=_empty(qkv, 1), tuning=tuning)
        # The LM head: float32 logits, its own tiles for one-tile rows.
        lm_head = PendingNorm(row, row, norm_w, 1e-6, out)
        one_tile = hidden <= ONE_TILE_MAX_K
        normed_gemv(lm_head, _empty(vocab, hidden, dtype=dtype), out_dtype=torch.float32,
                    block_n=DEFAULT_TUNING.lm_head_block_n if one_tile else None,
                    num_warps=DEFAULT_TUNING.lm_head_warps if one_tile else None)  # fmt: skip


# (n, k) of the decode GEMMs: qkv, o_proj (narrow and long: split K), down (silu_mul: split K),
# the LM head (N >= 64 Ki) and an 8B model's gate_up (16 Ki <= N < 64 Ki) and down (K = 14,336).
_GEMMS = [(QKV, HIDDEN), (HIDDEN, HEADS * HEAD_DIM), (VOCAB, HIDDEN), (28672, 4096), (4096, 14336)]


def _skinny_gemm(dtype: torch.dtype) -> None:
    for m in (1, 4):
        for n, k in _GEMMS:
            skinny_gemm(_empty(m, k, dtype=dtype), _empty(n, k, dtype=dtype))
        skinny_gemm(_empty(m, 2 * MLP, dtype=dtype), _empty(HIDDEN, MLP, dtype=dtype), silu_mul=True)
        skinny_gemm(
            _empty(m, HIDDEN, dtype=dtype), _empty(QKV, HIDDEN, dtype=dtype), _empty(QKV, dtype=dtype)
        )
        skinny_gemm_deferred(_empty(m, 2 * HIDDEN, dtype=dtype), _empty(HIDDEN, 2 * HIDDEN, dtype=dtype))
    # Ragged shapes (masked tiles), the tuning without whole-slice prefetch, and an odd config.
    skinny_gemm(_empty(3, 1000, dtype=dtype), _empty(1000, 1000, dtype=dtype), _empty(1000, dtype=dtype))
    skinny_gemm(_empty(1, 1000, dtype=dtype), _empty(1000, 1000, dtype=dtype))
    no_prefetch = replace(DEFAULT_TUNING, prefetch_whole_slice=False)
    skinny_gemm(_empty(1, HIDDEN, dtype=dtype), _empty(QKV, HIDDEN, dtype=dtype), tuning=no_prefetch)
    skinny_gemm(_empty(2, HIDDEN, dtype=dtype), _empty(QKV, HIDDEN, dtype=dtype),
                config=SkinnyGemmConfig(block_n=16, block_k=64, split_k=2, num_stages=2))  # fmt: skip
    # One decode token's attention partials merged as o_proj loads them.
    for splits in (4, 16):
        merge = PendingMerge(_empty(1, HEADS, splits, HEAD_DIM), _empty(1, HEADS, splits), dtype)
        skinny_gemm(merge, _empty(HIDDEN, HEADS * HEAD_DIM, dtype=dtype))


def _split_merge(dtype: torch.dtype) -> None:
    for tokens, splits in ((1, 16), (4, 4), (32, 2)):
        merge = PendingMerge(_empty(tokens, HEADS, splits, HEAD_DIM), _empty(tokens, HEADS, splits), dtype)
        merge.merge_into(_empty(tokens, HEADS, HEAD_DIM, dtype=dtype))


def _quant_gemv(dtype: torch.dtype) -> None:
    # One row, a few (tensor cores), and decode batches in row blocks of 16 to 128 rows.
    for weight_dtype in (FP8, torch.int8):
        for m in (1, 4, 24, 64, 100, 256):
            for n, k in _GEMMS:
                w = _empty(n, k, dtype=weight_dtype)
                quant_gemv(_empty(m, k, dtype=dtype), w, _empty(n, 1), None)
                quant_gemv(_empty(m, k, dtype=dtype), w, _empty(n, k // 128), 128, _empty(n, dtype=dtype))
            down = _empty(HIDDEN, MLP, dtype=weight_dtype)
            x = _empty(m, 2 * MLP, dtype=dtype)
            quant_gemv(x, down, _empty(HIDDEN, 1), None, silu_mul=True)
            quant_gemv_deferred(x, down, _empty(HIDDEN, MLP // 128), 128, silu_mul=True)
    # One row of INT8 through a float's mantissa, in Triton and in PTX (CudaTuning.int8_convert):
    # whole slices, split K, grouped scales, ragged (masked) tiles.
    for convert in ("magic", "magic_asm"):
        tuning = replace(DEFAULT_TUNING, int8_convert=convert)
        for n, k in (_GEMMS[1], _GEMMS[4], (1000, 1000)):
            w, x = _empty(n, k, dtype=torch.int8), _empty(1, k, dtype=dtype)
            quant_gemv(x, w, _empty(n, 1), None, tuning=tuning)
        quant_gemv(x[:, :896], w[:, :896], _empty(1000, 7), 128, tuning=tuning)
    # One decode token's attention partials merged as o_proj loads them: Qwen3-0.6B's heads and
    # Llama-3-8B's (32 of 128: its K slices with CudaTuning.merge_split_k), every INT8 conversion.
    for heads, splits in ((HEADS, 16), (32, 4)):
        k = heads * HEAD_DIM
        merge = PendingMerge(_empty(1, heads, splits, HEAD_DIM), _empty(1, heads, splits), dtype)
        for weight_dtype in (FP8, torch.int8):
            quant_gemv(merge, _empty(HIDDEN, k, dtype=weight_dtype), _empty(HIDDEN, 1), None)
        quant_gemv_deferred(merge, _empty(4096, k, dtype=FP8), _empty(4096, 1), None, _empty(4096, dtype=dtype),
                            tuning=replace(DEFAULT_TUNING, merge_split_k=4))  # fmt: skip
        for convert in ("cvt", "magic"):
            tuning = replace(DEFAULT_TUNING, int8_convert=convert)
            quant_gemv(merge, _empty(HIDDEN, k, dtype=torch.int8), _empty(HIDDEN, 1), None, tuning=tuning)


def _kv(cache_dtype: torch.dtype, num_blocks: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    # The pool's strided views: [num_blocks, layers, 2, block, kv heads, head_dim], layer 0.
    pool = _empty(num_blocks, 2, 2, BLOCK, KV_HEADS, HEAD_DIM, dtype=cache_dtype)
    return pool[:, 0, 0], pool[:, 0, 1]


def _qkv(tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    # q, k, v [tokens, heads, head_dim]: views of one qkv row per token, as the layer hands them over.
    sizes = [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM]
    qkv = torch.split(_empty(tokens, QKV, dtype=dtype), sizes, dim=-1)
    return tuple(t.view(tokens, -1, HEAD_DIM) for t in qkv)


def _rotary_kv(dtype: torch.dtype) -> None:
    tokens, inv_freq = 7, _empty(HEAD_DIM // 2)
    q, k, v = _qkv(tokens, dtype)
    positions, slots = _ints(tokens, dtype=torch.int64), _ints(tokens, dtype=torch.int64)
    rotary(positions, q, k, inv_freq)
    norms = (_empty(HEAD_DIM, dtype=dtype), _empty(HEAD_DIM, dtype=dtype), 1e-6)
    for cache_dtype in (dtype, FP8):
        k_cache, v_cache = _kv(cache_dtype)
        scales = KVScales(0.5, 2.0)
        for qk_norm in (None, norms):
            rotary_kv_write(positions, q, k, v, inv_freq, k_cache, v_cache, slots, qk_norm, scales=scales)
        kv_write(k, v, k_cache, v_cache, slots, scales=scales)


def _attention_batch(num_seqs: int, query_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # block tables, context lengths, query starts
    return _ints(num_seqs, 8), _ints(num_seqs), torch.arange(num_seqs + 1, dtype=torch.int32) * query_len


def _paged_attention(dtype: torch.dtype) -> None:
    scale = HEAD_DIM**-0.5
    for cache_dtype in (dtype, FP8):
        k_cache, v_cache = _kv(cache_dtype)
        scales = KVScales(0.5, 2.0)
        # Prefill (and extend), with and without a sliding window; decode of a big batch; small
        # decode batches split in 1, 4 and 16 (their partials merged by the merge kernel).
        for num_seqs, query_len, splits, window in (
            (3, 37, 1, None),
            (3, 37, 1, 24),
            (32, 1, 1, None),
            (32, 1, 4, 4096),
            (2, 1, 1, None),
            (2, 1, 4, None),
            (1, 1, 16, 24),
        ):
            paged_attention(_empty(num_seqs * query_len, HEADS, HEAD_DIM, dtype=dtype), k_cache, v_cache,
                            *_attention_batch(num_seqs, query_len), max_query_len=query_len, scale=scale,
                            sliding_window=window, num_splits=splits, scales=scales)  # fmt: skip
        # Decode with RoPE and the cache write inside, with and without Qwen3's per-head norm.
        for num_seqs, splits in ((1, 16), (4, 4), (8, 1)):
            q, k, v = _qkv(num_seqs, dtype)
            for qk_norm in (None, (_empty(HEAD_DIM, dtype=dtype), _empty(HEAD_DIM, dtype=dtype), 1e-6)):
                new = NewTokenRope(k, v, _ints(num_seqs, dtype=torch.int64), _ints(num_seqs, dtype=torch.int64),
                                   _empty(HEAD_DIM // 2), qk_norm)  # fmt: skip
                decode_attention(q, new, k_cache, v_cache, *_attention_batch(num_seqs, 1), scale=scale,
                                 num_splits=splits, defer_merge=num_seqs == 1, scales=scales)  # fmt: skip
        # Small decode without the early first tile (CudaTuning.prefetch_small_batch off).
        no_prefetch = replace(DEFAULT_TUNING, prefetch_small_batch=False)
        decode_attention(q, new, k_cache, v_cache, *_attention_batch(num_seqs, 1), scale=scale,
                         num_splits=splits, scales=scales, tuning=no_prefetch)  # fmt: skip


CASES: dict[str, Driver] = {
    "gumbel_argmax": _gumbel_argmax,
    "token_bitmask": _token_bitmask,
    "step_advance": _step_advance,
    "rms_norm": _rms_norm,
    "silu_and_mul": _silu_and_mul,
    "normed_gemv": _normed_gemv,
    "skinny_gemm": _skinny_gemm,
    "split_merge": _split_merge,
    "quant_gemv": _quant_gemv,
    "rotary_kv": _rotary_kv,
    "paged_attention": _paged_attention,
}
"""One driver per module of ``engine.kernels`` that launches kernels (argmax and e4m3 hold only
helpers, compiled inside step_advance's and the KV-cache writers' kernels)."""
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _launches(case: str, dtype: str) -> list[KernelLaunch]:
    """The variants the case's wrappers launch with these activations, as on Hopper."""
    with recorded_launches() as launches:
        CASES[case](DTYPES[dtype])
    return [variant for launch in launches for variant in on_hopper(launch)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_the_wrappers_launch(case: str, dtype: str) -> None:
    assert _launches(case, dtype)


def test_every_kernel_is_launched() -> None:
    """A new kernel needs a driver here: every ``*_kernel`` jit function of ``engine.kernels``
    (the launched ones; helpers compile inside them) is launched by some case."""
    launched = {v.kernel for case in CASES for v in _launches(case, "bf16")}
    kernels = set()
    for info in pkgutil.iter_modules(engine.kernels.__path__, "engine.kernels."):
        for name, value in vars(importlib.import_module(info.name)).items():
            fn = getattr(value, "fn", None)
            if name.endswith("_kernel") and callable(fn) and fn.__module__ == info.name:
                kernels.add(f"{info.name}.{name}")
    assert kernels, "found no kernels in engine.kernels"
    assert kernels <= launched, f"kernels no case launches: {sorted(kernels - launched)}"


@pytest.mark.slow
def test_every_kernel_variant_compiles_for_hopper() -> None:
    # One test, not one per case: the cases share most variants, and under pytest-xdist a
    # fixture shared by several tests would compile them again in every worker.
    variants: list[KernelLaunch] = []
    for case in CASES:
        for dtype in DTYPES:
            with contextlib.suppress(Exception):  # test_the_wrappers_launch reports it
                variants += _launches(case, dtype)
    errors = compile_for_hopper(covering(variants), workers=min(8, len(os.sched_getaffinity(0))))
    failures = [f"{launch.describe()}\n{error}" for launch, error in errors.items() if error]
    if failures:
        pytest.fail(
            f"{len(failures)} of {len(errors)} kernel variants do not compile for Hopper:\n\n"
            + "\n\n".join(failures),
            pytrace=False,
        )


def test_what_the_interpreter_runs_the_compiler_may_refuse() -> None:
    x = torch.randn(16, dtype=torch.bfloat16)
    out = torch.empty(16, dtype=FP8)
    store_kernel[(1,)](x, out, FP8=True)  # interpreted: no error
    with recorded_launches() as launches:
        store_kernel[(1,)](x, out, FP8=True)
    (error,) = compile_for_hopper(launches, workers=1).values()
    assert error is not None and "Return type mismatch" in error


def test_a_rejected_assembly_is_reported_as_its_error() -> None:
    with recorded_launches() as launches:
        bad_asm_kernel[(1,)](torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int32))
    (error,) = compile_for_hopper(launches, workers=1).values()
    assert error is not None and "prmtx" in error
