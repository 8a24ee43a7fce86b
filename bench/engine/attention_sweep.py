"""Decode attention over the paged cache on the GPU: launch shapes against the copy ceiling.

Qwen3-0.6B's attention shape (16 query heads, 8 KV heads, head_dim 128, bf16, 16-token blocks),
blocks scattered at random over a pool several times the L2, at the batch shapes the throughput
workload passes through. For each (tile_n, num_warps, num_stages) it reports the median time and
the KV bandwidth (bytes of K and V read over time) as a fraction of the measured copy ceiling.
Run on a GPU: ``python -m bench.engine.attention_sweep [--kv-cache-dtype fp8]`` (also a stage of
``bench.gpu_engine``).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from bench.engine.bandwidth import COPY_BANDWIDTH

SHAPES = ((256, 1024), (96, 1024), (48, 1536), (8, 1024))
"""(sequences, context tokens each)."""
CONFIGS = [
    {"tile_n": t, "num_warps": 4, "num_stages": s, "num_splits": k}
    for t, s, k in itertools.product((32, 64), (2, 3), (1, 2, 4))
]


def run(configs: list[dict[str, int]] | None = None, kv_cache_dtype: str = "auto") -> dict[str, Any]:
    """``kv_cache_dtype`` "fp8": the cache holds float8_e4m3fn (unit scales), one byte a value."""
    import torch

    results: dict[str, Any] = {}
    for num_seqs, context in SHAPES:
        results[f"{num_seqs}x{context}"] = _sweep(num_seqs, context, configs or CONFIGS, kv_cache_dtype)
        torch.cuda.empty_cache()
    return results


def _sweep(
    num_seqs: int, context: int, configs: list[dict[str, int]], kv_cache_dtype: str = "auto"
) -> dict[str, Any]:
    import torch
    import triton

    from engine.attention_backends.triton_backend import num_splits_for
    from engine.kernels import paged_attention

    heads, kv_heads, dim, block = 16, 8, 128, 16
    blocks_per_seq = context // block
    num_blocks = max(4 * num_seqs * blocks_per_seq, 16384)
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (num_blocks, block, kv_heads, dim)
    k_cache = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    v_cache = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    if kv_cache_dtype == "fp8":
        k_cache, v_cache = k_cache.to(torch.float8_e4m3fn), v_cache.to(torch.float8_e4m3fn)
    tables = torch.randperm(num_blocks, device="cuda", generator=gen)[: num_seqs * blocks_per_seq]
    tables = tables.view(num_seqs, blocks_per_seq).to(torch.int32)
    ctx = torch.full((num_seqs,), context, dtype=torch.int32, device="cuda")
    starts = torch.arange(num_seqs + 1, dtype=torch.int32, device="cuda")
    q = torch.randn(num_seqs, heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    splits = num_splits_for(num_seqs, kv_heads, 1)
    kv_bytes = 2 * num_seqs * context * kv_heads * dim * k_cache.element_size()

    def call(cfg: dict[str, int]) -> Any:
        cfg = {"num_splits": splits, **cfg}
        return paged_attention(
            q, k_cache, v_cache, tables, ctx, starts, max_query_len=1, scale=dim**-0.5, **cfg
        )  # fmt: skip

    reference = call({}).float()
    rows: list[dict[str, Any]] = []
    for cfg in [{}, *configs]:
        try:
            err = ((call(cfg).float() - reference).norm() / reference.norm()).item()
            ms = triton.testing.do_bench(lambda cfg=cfg: call(cfg), warmup=25, rep=100, return_mode="median")
        except Exception as exc:  # a shape the compiler refuses (shared memory) is a result too
            rows.append({**cfg, "error": repr(exc)[:200]})
            continue
        tb_s = kv_bytes / ms / 1e9
        rows.append(
            {**cfg, "ms": ms, "tb_s": tb_s, "of_ceiling": tb_s * 1e12 / COPY_BANDWIDTH, "rel_err": err}
        )
    timed = [r for r in rows if "ms" in r]
    best = min(timed, key=lambda r: r["ms"])
    print(
        f"attention {kv_cache_dtype} {num_seqs}x{context} splits {splits}: default {rows[0].get('ms', 0):.3f} ms "
        f"({rows[0].get('of_ceiling', 0):.2f} of ceiling), best {best}",
        flush=True,
    )
    return {"num_splits": splits, "kv_bytes": kv_bytes, "default": rows[0], "best": best, "all": rows}


if __name__ == "__main__":
    import sys

    dtype = sys.argv[sys.argv.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in sys.argv else "auto"
    print(json.dumps(run(kv_cache_dtype=dtype), indent=1, default=str)[-4000:])
