"""The LM head's fused norm + GEMV alone at Qwen3-0.6B's shape, over program widths and warps.

At one sequence the LM head (151,936 x 1,024 bf16, 311 MB) is the largest kernel of a decode step
and the only one with thousands of programs; its width and warps are tuned on their own
(``CudaTuning.lm_head_block_n`` / ``lm_head_warps``, ``engine.tuning``). Times on CUDA events over
back-to-back launches (GPU-bound at ~70 us a launch), with the bandwidth floor beside them::

    python -m bench.engine.greedy_tail --out $OUT
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import click


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--vocab", default=151936, show_default=True)
@click.option("--hidden", default=1024, show_default=True)
@click.option("--reps", default=50, show_default=True)
def main(out_dir: Path, vocab: int, hidden: int, reps: int) -> None:
    import torch

    from bench.engine.bandwidth import COPY_BANDWIDTH
    from bench.engine.cuda_timing import event_times_us
    from bench.provenance import provenance
    from engine.kernels.normed_gemv import PendingNorm, normed_gemv

    dtype, dev = torch.bfloat16, "cuda"
    weight = torch.randn(vocab, hidden, dtype=dtype, device=dev)
    res = torch.randn(1, hidden, dtype=dtype, device=dev)
    pending = PendingNorm(torch.randn(1, hidden, dtype=dtype, device=dev), res,
                          torch.ones(hidden, dtype=dtype, device=dev), 1e-6, torch.empty_like(res))  # fmt: skip
    floor_us = weight.numel() * weight.element_size() / COPY_BANDWIDTH * 1e6
    report: dict[str, object] = {
        "provenance": provenance(["bench.engine.greedy_tail"], "cuda"),
        "floor_us": floor_us,
        "us": {},
    }
    print(f"floor (copy ceiling, {COPY_BANDWIDTH / 1e12:.2f} TB/s): {floor_us:.2f} us", flush=True)
    for block_n, warps in itertools.product((16, 32, 64, 128), (4, 8, 16)):

        def fn(block_n: int = block_n, warps: int = warps) -> object:
            return normed_gemv(pending, weight, out_dtype=torch.float32, block_n=block_n, num_warps=warps)

        best = min(event_times_us(fn, reps, warm_up=5))
        report["us"][f"block_n={block_n},warps={warps}"] = best  # type: ignore[index]
        print(f"block_n={block_n:4d} warps={warps:3d} {best:8.2f} us", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "greedy_tail.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
