"""Time one Sampler call on a [num_seqs, vocab] batch (Qwen3 vocabulary), per configuration.

python -m bench.engine.sampling_speed --device cuda --num-seqs 256
"""

from __future__ import annotations

import time

import click
import torch

from engine.core.sampling_params import SamplingParams
from engine.sampling import Sampler, SamplingRow, make_generator

CONFIGS: dict[str, dict[str, float | int]] = {
    "greedy": {"temperature": 0.0},
    "temperature": {"temperature": 0.6},
    "top-k-top-p": {"temperature": 0.6, "top_k": 50, "top_p": 0.9},
    "penalties": {"temperature": 0.6, "repetition_penalty": 1.1, "frequency_penalty": 0.5},
    "logprobs": {"temperature": 0.6, "logprobs": 5},
}


@click.command()
@click.option("--device", default="cpu")
@click.option("--num-seqs", type=int, default=64)
@click.option("--vocab", type=int, default=151936)
@click.option("--seeded/--unseeded", default=False, help="One generator per row (seeded requests).")
@click.option("--iters", type=int, default=20)
def main(device: str, num_seqs: int, vocab: int, seeded: bool, iters: int) -> None:
    logits = torch.randn(num_seqs, vocab, device=device)
    sampler = Sampler(torch.Generator(device).manual_seed(0))
    for name, fields in CONFIGS.items():
        params = SamplingParams(seed=1 if seeded else None, **fields)  # type: ignore[arg-type]
        rows = [
            SamplingRow(
                params=params,
                prompt_token_ids=list(range(i, i + 512)),
                output_token_ids=list(range(i, i + 256)),
                generator=make_generator(params.seed, i, device),
            )
            for i in range(num_seqs)
        ]
        sampler(logits, rows)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            sampler(logits, rows).token_ids.tolist()
        elapsed = (time.perf_counter() - start) / iters
        click.echo(f"{name:>12} seeded={seeded} num_seqs={num_seqs}: {elapsed * 1000:8.3f} ms/step")


if __name__ == "__main__":
    main()
