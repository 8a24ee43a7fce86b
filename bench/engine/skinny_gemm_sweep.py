"""Every block-size variant of the skinny GEMM timed per decode shape, against F.linear (GPU only).

    python -m bench.engine.skinny_gemm_sweep [--quick] [--out results.txt]

Each call is timed inside one captured CUDA graph, as decode runs it; the latest sweep is
``bench/results/skinny_gemm_sweep_h200.txt``. Correctness of every variant is
``tests/unit/engine/kernels/test_skinny_gemm.py``; this only times them.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from engine.kernels import SkinnyGemmConfig, skinny_gemm, skinny_gemm_config

# Decode GEMMs per model: name -> (N, K) of W [N, K].
MODEL_SHAPES = {
    "qwen3-0.6b": {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072),
                   "lm_head": (151936, 1024)},
    "llama-3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                   "lm_head": (128256, 4096)},
}  # fmt: skip


def _operands(m: int, n: int, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(m, k).to(dtype).to("cuda")
    w = (torch.randn(n, k) / math.sqrt(k)).to(dtype).to("cuda")
    return x, w


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
            x, w = _operands(m, n, k, dtype)
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


def line_writer(argv: list[str]) -> Callable[[str], None]:
    """Prints each line, and appends it to the file after ``--out`` in argv when there is one."""
    path = argv[argv.index("--out") + 1] if "--out" in argv else None

    def write(line: str) -> None:
        print(line, flush=True)
        if path:
            with open(path, "a") as sink:
                sink.write(line + "\n")

    return write


def main() -> None:
    bench_skinny_gemm(variants=_sweep(quick="--quick" in sys.argv), out=line_writer(sys.argv))


if __name__ == "__main__":
    main()
