"""The greedy decode tail's kernels alone at Qwen3-0.6B's LM head: what the argmax costs.

Times, on CUDA events over back-to-back launches, the LM head's fused norm + GEMV with and without
its argmax keys, a separate pass making the keys from the logits, ``step_advance`` reducing the
keys to a token, and torch.argmax (what the sampler ran outside the graph)::

    python -m bench.greedy_tail --out $OUT
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--vocab", default=151936, show_default=True)
@click.option("--hidden", default=1024, show_default=True)
@click.option("--reps", default=200, show_default=True)
def main(out_dir: Path, vocab: int, hidden: int, reps: int) -> None:
    import torch

    from bench.provenance import provenance
    from engine.kernels.argmax import argmax_keys, keys_to_tokens
    from engine.kernels.normed_gemv import PendingNorm, normed_gemv, normed_gemv_argmax
    from engine.kernels.step_advance import step_advance

    dtype, dev = torch.bfloat16, "cuda"
    weight = torch.randn(vocab, hidden, dtype=dtype, device=dev)
    res = torch.randn(1, hidden, dtype=dtype, device=dev)
    pending = PendingNorm(torch.randn(1, hidden, dtype=dtype, device=dev), res,
                          torch.ones(hidden, dtype=dtype, device=dev), 1e-6, torch.empty_like(res))  # fmt: skip
    logits, keys = normed_gemv_argmax(pending, weight, out_dtype=torch.float32)
    assert keys_to_tokens(keys).item() == logits.argmax().item()
    inputs = {
        "token": torch.zeros(1, dtype=torch.long, device=dev),
        "out": torch.zeros(1, dtype=torch.long, device=dev),
        "pos": torch.zeros(1, dtype=torch.long, device=dev),
        "ctx": torch.zeros(1, dtype=torch.int32, device=dev),  # padding row: only the token
        "slot": torch.full((1,), -1, dtype=torch.long, device=dev),
        "table": torch.zeros(1, 64, dtype=torch.int32, device=dev),
    }
    cases: dict[str, Callable[[], object]] = {
        "lm_head": lambda: normed_gemv(pending, weight, out_dtype=torch.float32),
        "lm_head_with_keys": lambda: normed_gemv_argmax(pending, weight, out_dtype=torch.float32),
        "keys_pass_over_logits": lambda: argmax_keys(logits),
        "step_advance_from_head_keys": lambda: step_advance(keys, *inputs.values(), 16),
        "torch_argmax": lambda: logits.argmax(dim=-1),
    }
    report: dict[str, object] = {"provenance": provenance(["bench.greedy_tail"], "cuda"), "us": {}}
    for name, fn in cases.items():
        for _ in range(10):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(5):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e3 / reps)
        report["us"][name] = best  # type: ignore[index]
        print(f"{name:32s} {best:8.2f} us", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "greedy_tail.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
