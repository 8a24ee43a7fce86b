"""Tensor and pipeline parallel: batch-1 latency and nano-vllm throughput at each layout
(``tensor_parallel_size`` x ``pipeline_parallel_size``).

    python -m bench.engine.tensor_parallel --shape llama3-8b --tp 1,2,4 --device cuda --dtype bfloat16
    python -m bench.engine.tensor_parallel --shape llama3-8b --layout 1x1,2x1,1x2,2x2 --device cuda \\
        --dtype bfloat16                                                    # PP 2 against TP 2
    python -m bench.engine.tensor_parallel --shape llama3-70b --tp 2,4 --device cuda --dtype bfloat16
    python -m bench.engine.tensor_parallel --shape tiny --tp 1,2 --device cpu --dtype float32 \\
        --throughput-scale 0.01 --new-tokens 8                              # CPU smoke run

Random weights in a Llama checkpoint of the shape (``bench.engine.random_model.write_random_llama``;
``--layers`` keeps the first N layers of a shape that would not fit the disk or the time).
For each size, one ``engine.LLM`` (ranks spawned as in production) serves:

1. batch 1: a 128-token prompt, ``--new-tokens`` greedy tokens, EOS ignored; the first step's
   time (prefill, time to first token) and the median of the decode steps' (time per token).
   The greedy tokens are kept: every size must produce the same ones.
2. throughput on nano-vllm's workload (``bench.engine.throughput.time_workload``), scaled by
   ``--throughput-scale``.

TP or PP > 1 runs the engine's plain path (no fused step, CUDA graphs or asynchronous
scheduling), so 1x1 here is measured on the fused path it normally runs; the JSON says which
path each used. PP's batch 1 is one micro-batch, so its stages take turns: the layout pays for
itself in throughput (micro-batches overlap) and in memory, not in batch-1 latency.
One JSON file in bench/results/ with provenance, rewritten after every size.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from bench.engine.random_model import SHAPES as QWEN3_SHAPES
from bench.engine.random_model import write_random_llama
from bench.engine.throughput import RESULTS_DIR, time_workload
from bench.engine.workload import nano_vllm_workload
from bench.gpu_engine import LLAMA3_8B
from bench.provenance import provenance

PROMPT_LEN = 128
TINY = QWEN3_SHAPES["tiny"]

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {
        **TINY,
        "num_key_value_heads": 4,  # divisible by TP 4
        # Above the workload's prompt ids (up to 10000); not a multiple of 4, so TP 4 pads it.
        "vocab_size": 10242,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    "llama3-8b": LLAMA3_8B,
    "llama3-70b": {
        **LLAMA3_8B,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
    },
}


def batch1(llm: Any, new_tokens: int, seed: int = 0) -> dict[str, Any]:
    from engine import SamplingParams

    engine = llm.engine
    model = next(iter(engine.models))
    rng = random.Random(seed)
    vocab = engine.models[model].config.vocab_size
    prompt = [rng.randrange(vocab - 1) for _ in range(PROMPT_LEN)]
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    engine.add_request("warm-up", model, prompt[:16], SamplingParams(temperature=0, max_tokens=4))
    while engine.has_work:
        engine.step()
    engine.add_request("batch1", model, prompt, params)
    tokens: list[int] = []
    steps: list[float] = []
    while engine.has_work:
        start = time.perf_counter()
        for _, delta in engine.step():  # returns host tokens: the step has finished on the device
            tokens.extend(delta.token_ids)
        steps.append(time.perf_counter() - start)
    decode = steps[1:] or steps
    return {
        "prompt_tokens": PROMPT_LEN,
        "new_tokens": len(tokens),
        "ttft_ms": steps[0] * 1e3,
        "tpot_median_ms": statistics.median(decode) * 1e3,
        "tpot_mean_ms": statistics.fmean(decode) * 1e3,
        "tokens": tokens,
    }


def run_size(
    model_dir: Path, tp: int, *, pp: int = 1, device: str, dtype: str, new_tokens: int, scale: float
) -> dict[str, Any]:
    from engine import LLM

    start = time.perf_counter()
    with LLM(
        str(model_dir), dtype=dtype, device=device, tensor_parallel_size=tp, pipeline_parallel_size=pp
    ) as llm:
        load_s = time.perf_counter() - start
        runner = next(iter(llm.engine.runners.values()))
        out: dict[str, Any] = {
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "path": "fused" if runner.fused is not None else "plain",
            "cuda_graphs": runner.graphs is not None,
            "load_s": load_s,
            "kv_blocks": llm.engine.block_pool.num_blocks,
            "batch1": batch1(llm, new_tokens),
        }
        if scale > 0:
            workload = nano_vllm_workload().scaled(scale)
            system = f"ours-tp{tp}" + (f"-pp{pp}" if pp > 1 else "")
            out["throughput"] = asdict(time_workload(llm, workload, device, system=system))
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    return out


@click.command()
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default="tiny")
@click.option("--tp", "sizes", default="1,2", help="Comma-separated tensor_parallel_size values.")
@click.option(
    "--layout",
    "layouts",
    default=None,
    help="Comma-separated TPxPP layouts (1x1,2x1,1x2); replaces --tp.",
)
@click.option("--device", default="cpu")
@click.option("--dtype", default="float32")
@click.option("--layers", type=int, default=None, help="Keep only the first N decoder layers.")
@click.option("--new-tokens", type=int, default=128, show_default=True)
@click.option("--throughput-scale", type=float, default=1.0, show_default=True, help="0 skips throughput.")
@click.option("--model-dir", type=click.Path(path_type=Path), default=None, help="Reuse a checkpoint.")
@click.option("--out", "output", type=click.Path(path_type=Path), default=None)
def tensor_parallel(
    shape: str,
    sizes: str,
    layouts: str | None,
    device: str,
    dtype: str,
    layers: int | None,
    new_tokens: int,
    throughput_scale: float,
    model_dir: Path | None,
    output: Path | None,
) -> None:
    """Batch-1 latency and throughput of one model shape at several tensor/pipeline-parallel layouts."""
    grid = _layouts(layouts) if layouts else [(int(s), 1) for s in sizes.split(",") if s.strip()]
    fields = {**SHAPES[shape], **({"num_hidden_layers": layers} if layers else {})}
    path = output or RESULTS_DIR / (
        f"tensor_parallel_{shape}_{device.split(':')[0]}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    report: dict[str, Any] = {
        "benchmark": "tensor_parallel",
        "shape": shape,
        "config": fields,
        "dtype": dtype,
        "device": device,
        "throughput_scale": throughput_scale,
        "results": [],
        "errors": {},
        **provenance(sys.argv, device),
    }
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = model_dir or write_random_llama(
            Path(tmp) / shape, fields, dtype=dtype, device="cuda" if device.startswith("cuda") else "cpu"
        )
        for tp, pp in grid:
            name = str(tp) if pp == 1 and not layouts else f"{tp}x{pp}"
            try:
                result = run_size(
                    checkpoint,
                    tp,
                    pp=pp,
                    device=device,
                    dtype=dtype,
                    new_tokens=new_tokens,
                    scale=throughput_scale,
                )
            except Exception as exc:  # one size failing (out of memory) keeps the others
                report["errors"][name] = f"{type(exc).__name__}: {exc}"
                click.echo(f"{name}: FAILED {report['errors'][name]}", err=True)
                continue
            report["results"].append(result)
            b1 = result["batch1"]
            tput = result.get("throughput", {}).get("output_tok_s", float("nan"))
            click.echo(
                f"tp {tp} x pp {pp} ({result['path']}): ttft {b1['ttft_ms']:.1f} ms"
                f"  tpot {b1['tpot_median_ms']:.2f} ms  throughput {tput:.1f} output tok/s"
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2))
    token_sets = {tuple(r["batch1"]["tokens"]) for r in report["results"]}
    report["greedy_tokens_agree"] = len(token_sets) <= 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    click.echo(f"wrote {path}")


def _layouts(text: str) -> list[tuple[int, int]]:
    grid = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        tp, sep, pp = part.partition("x")
        if not sep or not tp.isdigit() or not pp.isdigit():
            raise click.BadParameter(f"{part!r} is not TPxPP (e.g. 2x1)", param_hint="--layout")
        grid.append((int(tp), int(pp)))
    return grid


if __name__ == "__main__":
    tensor_parallel()
