"""Structured output: grammar libraries' mask time and coverage, and constrained vs free TPOT.

    python -m bench.structured.output                       # CPU: masks (demo + 150k vocab), TPOT
    python -m bench.structured.output --device cuda --skip masks --skip coverage   # the H200 run
    python -m bench.structured.output --device cuda --skip masks --model /path/to/qwen3

``engine-mask`` prints the engine's per-step mask cost, old path beside new; ``tpot`` free vs
constrained decoding (new and old mask), on CUDA with a random Qwen3-0.6B-shaped model and a
151,643-token vocabulary unless ``--model`` names a checkpoint.

Writes bench/results/structured_output_<device>.json (or --out). See bench/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import click

from bench.provenance import provenance
from bench.structured.masks import coverage, engine_mask_times, mask_times
from bench.structured.vocab import real_like_tokenizer

_RESULTS = Path(__file__).resolve().parents[1] / "results"


def _demo_tokenizer() -> tuple[Any, int]:
    from tokenizers import Tokenizer

    from engine.loading.demo import build_demo_files

    files = build_demo_files("demo-chat")
    tok = Tokenizer.from_str(files["tokenizer.json"].decode())
    eos = json.loads(files["config.json"])["eos_token_id"]
    return tok, eos


@click.command()
@click.option("--device", default="cpu")
@click.option("--out", type=click.Path(path_type=Path), default=None)
@click.option(
    "--skip", multiple=True, type=click.Choice(["masks", "engine-mask", "coverage", "tpot", "large-vocab"])
)
@click.option("--library", "libraries", multiple=True, default=("llguidance", "xgrammar", "outlines-core"))
@click.option("--model", default=None, help="A model directory for TPOT (default: the demo model).")
@click.option("--batches", default="1,64")
@click.option("--max-tokens", type=int, default=48)
def main(
    device: str,
    out: Path | None,
    skip: tuple[str, ...],
    libraries: tuple[str, ...],
    model: str | None,
    batches: str,
    max_tokens: int,
) -> None:
    sizes = [int(b) for b in batches.split(",")]
    threads = os.cpu_count() or 1
    result: dict[str, Any] = {
        "provenance": provenance(sys.argv, device.split(":")[0]),
        "device": device,
        "host": platform.node(),
        "threads": threads,
    }
    vocabs: dict[str, tuple[Any, int]] = {"demo-chat": _demo_tokenizer()}
    if "large-vocab" not in skip:
        tok = real_like_tokenizer()
        vocabs["real-like-151643"] = (tok, tok.token_to_id("<|endoftext|>"))
    if "masks" not in skip:
        result["masks"] = {}
        for vname, (tok, eos) in vocabs.items():
            records = mask_times(tok, eos, sizes, threads, list(libraries))
            result["masks"][vname] = records
            for r in records:
                click.echo(f"{vname:>18} {json.dumps(r)}")
    if "engine-mask" not in skip:
        result["engine_mask"] = {
            name: engine_mask_times(tok, eos, sizes, device) for name, (tok, eos) in vocabs.items()
        }
        click.echo(json.dumps(result["engine_mask"], indent=1))
    if "coverage" not in skip:
        tok, eos = vocabs["demo-chat"]
        result["coverage"] = coverage(tok, eos, threads, list(libraries))
        click.echo(json.dumps(result["coverage"], indent=1))
    if "tpot" not in skip:
        from bench.structured.tpot import tpot

        result["tpot"] = tpot(device, model, sizes, max_tokens)
        click.echo(json.dumps(result["tpot"], indent=1))
    path = out or _RESULTS / f"structured_output_{device.split(':')[0]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    click.echo(f"wrote {path}")


if __name__ == "__main__":
    main()
