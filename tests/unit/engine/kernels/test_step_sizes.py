"""A step's sizes never pick a compiled kernel variant.

On a GPU, Triton compiles one variant per specialization of a launch's integer arguments (equal
to 1, divisible by 16, neither). An argument that changes with every step — a token count, the
block tables' width, query tiles per sequence — therefore compiles new variants while the server
is taking traffic, each one a stall of the step loop: on the H200 four attention variants
compiled in the middle of a 32 req/s run and took its TTFT p99 from 143 ms to 878 ms
(bench/BENCHMARKS.md). Here the launches of eager prefill / extend steps of many sizes are
recorded under the interpreter and turned into what a CUDA launch specializes on
(``kernel_launch``): each kernel must come out as one variant per path, whatever the sizes.
"""

from __future__ import annotations

import pytest
import torch

from engine.kernels import (
    gumbel_argmax,
    paged_attention,
    rms_norm,
    rotary_kv_write,
    silu_and_mul,
)
from engine.kernels.step_advance import step_advance
from engine.quantization.kv_quant import KVScales
from tests.unit.engine.kernels.kernel_launch import KernelLaunch, recorded_launches

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="records interpreted launches: on a GPU no kernel is interpreted"
)

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB, BLOCK = 1024, 16, 8, 128, 3072, 151936, 16
DTYPE = torch.bfloat16
# Token counts and (sequences, longest query, block-table width) of eager steps: equal to 1,
# divisible by 16 and neither, for every size.
TOKENS = (1, 2, 7, 16, 37, 64, 100, 512, 1000)
PREFILLS = ((2, 7, 3), (3, 32, 16), (2, 513, 1), (5, 1000, 64), (3, 37, 8), (4, 17, 33), (1, 16, 1))


def _empty(*shape: int, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype)


def _variants(launches: list[KernelLaunch]) -> dict[str, set[tuple[object, ...]]]:
    variants: dict[str, set[tuple[object, ...]]] = {}
    for launch in launches:
        key = (launch.signature, launch.constexprs, launch.attrs, launch.options)
        variants.setdefault(launch.name, set()).add(key)
    return variants


def _kv_cache() -> tuple[torch.Tensor, torch.Tensor]:
    pool = _empty(64, 2, 2, BLOCK, KV_HEADS, HEAD_DIM)  # the pool's strided per-layer views
    return pool[:, 0, 0], pool[:, 0, 1]


def test_prefill_attention_is_one_variant_whatever_the_batch() -> None:
    k_cache, v_cache = _kv_cache()
    with recorded_launches() as launches:
        for num_seqs, query_len, width in PREFILLS:
            q = _empty(num_seqs * query_len, HEADS, HEAD_DIM)
            tables, context_lens = (
                torch.zeros(num_seqs, width, dtype=torch.int32),
                torch.zeros(num_seqs, dtype=torch.int32),
            )
            starts = torch.arange(num_seqs + 1, dtype=torch.int32) * query_len
            paged_attention(
                q, k_cache, v_cache, tables, context_lens, starts, max_query_len=query_len, scale=0.1
            )
    assert len(launches) == len(PREFILLS)
    variants = _variants(launches)["_attention_kernel"]
    assert len(variants) == 1, [dict(v[2]) for v in variants]


def test_token_count_kernels_are_one_variant_whatever_the_count() -> None:
    k_cache, v_cache = _kv_cache()
    norms = (_empty(HEAD_DIM), _empty(HEAD_DIM), 1e-6)
    longs = torch.int64
    with recorded_launches() as launches:
        for n in TOKENS:
            x = _empty(n, HIDDEN)
            rms_norm(x, _empty(HIDDEN), 1e-6, residual=_empty(n, HIDDEN))
            silu_and_mul(_empty(n, 2 * MLP))
            qkv = torch.split(
                _empty(n, (HEADS + 2 * KV_HEADS) * HEAD_DIM),
                [HEADS * HEAD_DIM, *[KV_HEADS * HEAD_DIM] * 2],
                -1,
            )
            q, k, v = (t.view(n, -1, HEAD_DIM) for t in qkv)
            positions = torch.zeros(n, dtype=longs)
            rotary_kv_write(positions, q, k, v, _empty(HEAD_DIM // 2, dtype=torch.float32), k_cache, v_cache,
                            positions, norms, scales=KVScales(1.0, 1.0))  # fmt: skip
            logits = _empty(n, VOCAB, dtype=torch.float32)
            gumbel_argmax(logits, _empty(n, dtype=torch.float32), seed=7)
            ints = torch.zeros(n, dtype=torch.int32)
            step_advance(logits, ints, *(torch.zeros(n, dtype=longs) for _ in range(3)), ints,
                         torch.zeros(n, dtype=longs), torch.zeros(n, 64, dtype=torch.int32), BLOCK)  # fmt: skip
    variants = _variants(launches)
    assert {"_rms_norm_kernel", "_silu_and_mul_kernel", "_rotary_kv_kernel", "_step_advance_kernel"} <= set(
        variants
    )
    assert {name: len(keys) for name, keys in variants.items() if len(keys) > 1} == {}
