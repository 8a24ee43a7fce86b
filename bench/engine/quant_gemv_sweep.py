"""Launch shapes of the FP8 / INT8 weight GEMV timed per decode shape, beside the bf16 skinny GEMM
on the same shape (GPU only)::

    python -m bench.engine.quant_gemv_sweep [--quick] [--out results.txt]
    python -m bench.engine.quant_gemv_sweep --rows [--out results.txt]    # decode batches, 32..256 rows
    python -m bench.engine.quant_gemv_sweep --int8 [--quick] [--out results.txt]  # INT8 conversions

With ``--rows`` each shape of Qwen3-0.6B and Llama-3-8B at 32..256 rows is timed as bf16 cuBLAS
(what a bf16 model runs there), FP8 ``torch._scaled_mm`` with its activation quantization (what
FP8 ran before quant_gemv took these rows), quant_gemv's pick, and the best row-block variants.
With ``--int8`` each Llama-3-8B shape at one row is timed as FP8 and as INT8 with each conversion
of ``CudaTuning.int8_convert`` at quant_gemv's pick (and the best of eight one-row shapes near
it per conversion, but with ``--quick``), each INT8 result checked bitwise against the plain
conversion's.

Timed as ``bench.engine.skinny_gemm_sweep`` times (calls replayed in one CUDA graph, cycling
through enough weight copies to overflow L2). GB/s counts the bytes each variant actually reads
of its weight: one per element quantized, two in bf16. Correctness of every launch shape is
``tests/unit/engine/kernels/test_quant_gemv.py``; this only times them.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import get_args

import torch
import torch.nn.functional as F

from bench.engine.skinny_gemm_sweep import MODEL_SHAPES, _operands, _time_us, line_writer
from engine.kernels import SkinnyGemmConfig, skinny_gemm
from engine.kernels.quant_gemv import quant_gemv, quant_gemv_config
from engine.quantization.scaled_mm import fp8_scaled_mm
from engine.quantization.tensors import dequantize, quantize
from engine.tuning import DEFAULT_TUNING, CudaTuning, Int8Convert


def _sweep(m: int, quick: bool) -> list[SkinnyGemmConfig]:
    if m == 1:
        grid = itertools.product(
            (16, 32), (256, 512, 1024, 2048), (1, 2, 4, 8), (4, 8), (3,) if quick else (2, 3, 4)
        )
        return [SkinnyGemmConfig(block_n=bn, block_k=bk, split_k=s, use_dot=False, num_warps=nw, num_stages=ns)
                for bn, bk, s, nw, ns in grid]  # fmt: skip
    grid = itertools.product((16, 32, 64), (128, 256, 512), (1, 2, 4, 8), (4, 8), (3,) if quick else (3, 4))
    return [SkinnyGemmConfig(block_n=bn, block_k=bk, split_k=s, use_dot=True, num_warps=nw, num_stages=ns)
            for bn, bk, s, nw, ns in grid]  # fmt: skip


def _runner(
    config: SkinnyGemmConfig, scale: torch.Tensor, tuning: CudaTuning = DEFAULT_TUNING
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return lambda a, wq: quant_gemv(a, wq, scale, None, config=config, tuning=tuning)


def _timed(
    x: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    want: torch.Tensor,
    configs: Iterable[SkinnyGemmConfig],
    out: Callable[[str], None],
    tuning: CudaTuning = DEFAULT_TUNING,
) -> list[tuple[float, SkinnyGemmConfig]]:
    """(µs, config) of every launch shape that compiles and is right, fastest first."""
    results = []
    for config in configs:
        run = _runner(config, scale, tuning)
        try:
            torch.testing.assert_close(run(x, q), want, atol=2e-2, rtol=2e-2)
            results.append((_time_us(run, x, q), config))
        except Exception as exc:  # a variant that does not compile or fit is reported, not fatal
            out(f"    {config}: {type(exc).__name__}: {str(exc)[:120]}")
    return sorted(results, key=lambda r: r[0])


def _shapes(
    models: Iterable[str], ms: Iterable[int], fmt: str
) -> Iterator[
    tuple[str, str, int, int, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
]:
    """Every quantized GEMM of the models (lm_head stays bf16) at every row count: names, shape,
    x, the bf16 weight, its quantized form and scales, and the dequantized reference product."""
    for model, m in itertools.product(models, ms):
        for name, (n, k) in MODEL_SHAPES[model].items():
            if name == "lm_head":
                continue
            x, w = _operands(m, n, k, torch.bfloat16)
            q, scale = quantize(w.float(), fmt)
            want = F.linear(x.float(), dequantize(q, scale)).to(torch.bfloat16)
            yield model, name, m, n, k, x, w, q, scale, want


def bench_quant_gemv(
    ms: Iterable[int] = (1, 8),
    fmt: str = "fp8",
    models: Iterable[str] = tuple(MODEL_SHAPES),
    quick: bool = False,
    top: int = 5,
    out: Callable[[str], None] = print,
) -> None:
    """Print µs and GB/s for bf16 (skinny GEMM), the heuristic's pick and the best variants."""
    for model, name, m, n, k, x, w, q, scale, want in _shapes(models, ms, fmt):
        bf16 = _time_us(lambda x, w: skinny_gemm(x, w), x, w)
        pick = quant_gemv_config(m, n, k)
        mine = _time_us(_runner(pick, scale), x, q)
        configs = [c for c in _sweep(m, quick) if k // c.split_k >= c.block_k]
        results = _timed(x, q, scale, want, configs, out)
        out(f"{model} {name} N={n} K={k} M={m} {fmt}: bf16 skinny {bf16:.2f} µs {w.nbytes / 1e3 / bf16:.0f} GB/s"
            f" | heuristic {mine:.2f} µs {q.nbytes / 1e3 / mine:.0f} GB/s {pick}")  # fmt: skip
        for us, config in results[:top]:
            out(f"    {us:6.2f} µs {q.nbytes / 1e3 / us:5.0f} GB/s  {config}")


def _row_block_sweep(m: int) -> list[SkinnyGemmConfig]:
    block_ms = [bm for bm in (16, 32, 64, 128) if bm <= max(16, m)]
    grid = itertools.product((32, 64, 128), (64, 128, 256), block_ms, (4, 8))
    return [SkinnyGemmConfig(block_n=bn, block_k=bk, block_m=bm, num_warps=nw) for bn, bk, bm, nw in grid]


def bench_rows(
    ms: Iterable[int] = (32, 64, 128, 256),
    models: Iterable[str] = tuple(MODEL_SHAPES),
    top: int = 3,
    out: Callable[[str], None] = print,
) -> None:
    """Decode batches above 16 rows: bf16 cuBLAS, FP8 _scaled_mm, quant_gemv's pick and its best."""
    for model, name, m, n, k, x, w, q, scale, want in _shapes(models, ms, "fp8"):
        cublas = _time_us(lambda a, b: F.linear(a, b), x, w)
        scaled = _time_us(lambda a, wq, s=scale: fp8_scaled_mm(a, wq, s), x, q)
        pick = quant_gemv_config(m, n, k)
        mine = _time_us(_runner(pick, scale), x, q)
        results = _timed(x, q, scale, want, _row_block_sweep(m), out)
        out(f"{model} {name} N={n} K={k} M={m}: bf16 cuBLAS {cublas:.2f} µs | fp8 scaled_mm {scaled:.2f} µs"
            f" | quant_gemv {mine:.2f} µs {q.nbytes / 1e3 / mine:.0f} GB/s {pick}")  # fmt: skip
        for us, config in results[:top]:
            out(f"    {us:6.2f} µs {q.nbytes / 1e3 / us:5.0f} GB/s  {config}")


def _one_row_neighbours(k: int) -> list[SkinnyGemmConfig]:
    # The one-row shapes near quant_gemv's picks (the full sweep per conversion outlasts a call).
    grid = itertools.product((512, 1024), (1, 2), (4, 8))
    return [SkinnyGemmConfig(block_n=16, block_k=bk, split_k=s, use_dot=False, num_warps=nw)
            for bk, s, nw in grid if k // s >= bk]  # fmt: skip


def bench_int8_conversions(quick: bool = False, out: Callable[[str], None] = print) -> None:
    """Llama-3-8B's shapes at one row: FP8, then INT8 with each conversion at quant_gemv's pick
    (and the best swept launch shape), and whether it gives the plain conversion's bits."""
    for _, name, m, n, k, x, w, q, scale, want in _shapes(("llama-3-8b",), (1,), "int8"):
        pick = quant_gemv_config(m, n, k)
        q8, scale8 = quantize(w.float(), "fp8")
        fp8 = _time_us(_runner(pick, scale8), x, q8)
        out(f"llama-3-8b {name} N={n} K={k} M={m}: fp8 {fp8:.2f} µs {q8.nbytes / 1e3 / fp8:.0f} GB/s {pick}")
        plain = _runner(pick, scale)(x, q)
        for convert in get_args(Int8Convert):
            tuning = replace(DEFAULT_TUNING, int8_convert=convert)
            try:
                same = torch.equal(_runner(pick, scale, tuning)(x, q), plain)
                us = _time_us(_runner(pick, scale, tuning), x, q)
            except Exception as exc:  # a conversion that does not compile is reported, not fatal
                out(f"    int8 {convert}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            line = f"    int8 {convert:9s} {us:6.2f} µs {q.nbytes / 1e3 / us:5.0f} GB/s  same bits: {same}"
            if not quick:
                best = _timed(x, q, scale, want, _one_row_neighbours(k), out, tuning)[:1]
                line += "".join(f" | best {b:.2f} µs {b_config}" for b, b_config in best)
            out(line)


def main() -> None:
    write = line_writer(sys.argv)
    quick = "--quick" in sys.argv
    if "--rows" in sys.argv:
        bench_rows(out=write)
        return
    if "--int8" in sys.argv:
        bench_int8_conversions(quick=quick, out=write)
        return
    bench_quant_gemv(models=("llama-3-8b",), quick=quick, out=write)
    bench_quant_gemv(ms=(1,), models=("qwen3-0.6b",), quick=quick, out=write)
    bench_quant_gemv(ms=(1,), fmt="int8", models=("llama-3-8b",), quick=True, top=2, out=write)


if __name__ == "__main__":
    main()
