"""Quantization on the GPU: batch-1 decode and memory of the Llama-3-8B shape, and the nano-vllm
throughput workload on the Qwen3-0.6B shape, for bf16, FP8 and INT8 (W8A16) weights, an FP8 KV
cache, and FP8 weights with an FP8 KV cache.

Random bf16 weights, quantized at load (``quantization = "fp8" | "int8"``, one scale per output
channel); the KV cache as ``kv_cache_dtype`` ("auto": bf16, or "fp8"). Decode as
``bench.gpu_engine`` (prompt 128, 256 new tokens, greedy, CUDA graphs); the floor is the weight
bytes actually stored plus the KV read per token at the measured copy bandwidth. Throughput: every
variant in the same run on a 48 GiB pool, with its speed-up over bf16, and each variant's memory:
the model's bytes on the GPU and the KV blocks the engine's default sizing (90 % of the memory
left after the weights) gives it. One device call, JSON to ``--out``/quantization.json::

    python -m bench.engine.quantization --out $OUT [--throughput-scale 0.25] [--skip decode]
    python -m bench.engine.quantization --out $OUT --skip throughput --decode-weights int8 \\
        --int8-convert cvt --int8-convert magic --int8-convert magic_asm    # INT8 conversions A/B

``--throughput-shape llama3-8b`` runs the throughput stage on the Llama-3-8B shape (16 GB of bf16
weights, where the Qwen3-0.6B shape's 1.2 GB are a small part of a 256-sequence step).

``--norm-in-gemv-max-k 8192`` times the decode weights a second time with the norms at hidden
4,096 fused into the GEMMs after them (long rows, chunked; the default leaves them to the norm
kernel until this A/B has run on a GPU)::

    python -m bench.engine.quantization --out $OUT --skip throughput --decode-weights fp8 \\
        --decode-weights int8 --norm-in-gemv-max-k 8192

``--merge-max-k 4096`` times them again with o_proj merging attention's split partials in its
loads at Llama-3-8B's width (``CudaTuning.merge_max_k``; the default keeps the merge kernel
there until this A/B has run on a GPU)::

    python -m bench.engine.quantization --out $OUT --skip throughput --decode-weights fp8 \\
        --decode-weights int8 --merge-max-k 4096
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast, get_args

import click

from bench.engine.bandwidth import COPY_BANDWIDTH
from bench.gpu_engine import (
    NEW_TOKENS,
    PROMPT_LEN,
    _decode_variant,
    _floor,
    _free_gpu,
    _hf_model,
    _safe,
    _save,
    run_throughput,
)
from bench.provenance import provenance
from engine.tuning import DEFAULT_TUNING, CudaTuning, Int8Convert

QUANTIZATIONS: tuple[str | None, ...] = (None, "fp8", "int8")
THROUGHPUT_VARIANTS: tuple[tuple[str, str | None, str], ...] = (
    ("bf16", None, "auto"),
    ("fp8", "fp8", "auto"),
    ("int8", "int8", "auto"),
    ("fp8-kv", None, "fp8"),
    ("fp8+fp8-kv", "fp8", "fp8"),
)
"""(label, quantization, kv_cache_dtype) of the throughput run."""


def _label(quantization: str | None) -> str:
    return quantization or "bf16"


def _stored_weight_bytes(path: Path, quantization: str | None) -> dict[str, float]:
    """Bytes of the hosted model's parameters (quantized weights + scales) and the GPU memory
    allocated once it is loaded (no real KV pool: an 8 MiB one, a few blocks)."""
    import torch

    from engine import LLM

    _free_gpu()
    before = torch.cuda.memory_allocated()
    llm = LLM(str(path), dtype="bfloat16", device="cuda", kv_cache_bytes=8 << 20, max_num_seqs=1,
              cuda_graphs=False, quantization=quantization)  # fmt: skip
    model = llm.engine.models[llm.model_names[0]].model
    stored = sum(p.numel() * p.element_size() for p in model.parameters())
    allocated = torch.cuda.memory_allocated() - before
    del llm, model
    _free_gpu()
    return {"weight_bytes": stored, "allocated_bytes": allocated}


def _with_floor(timed: dict[str, Any], weight_bytes: float | None, kv_bytes: float) -> dict[str, Any]:
    """A decode timing with its ms per token, the weight-streaming floor and the MBU."""
    graphs = timed.get("ours_graphs", {})
    if "decode_tok_s" in graphs and weight_bytes is not None:
        floor_ms = (weight_bytes + kv_bytes) / COPY_BANDWIDTH * 1e3
        graphs["ms_per_token"] = 1e3 / graphs["decode_tok_s"]
        graphs["floor_ms"] = floor_ms
        graphs["mbu"] = floor_ms / graphs["ms_per_token"]
    return timed


def _decode_variants(
    weights: tuple[str, ...],
    int8_converts: tuple[str, ...],
    norm_max_ks: tuple[int, ...] = (),
    merge_max_ks: tuple[int, ...] = (),
) -> list[tuple[str, str | None, CudaTuning]]:
    """(label, quantization, tuning) of each decode timed: the weights asked for (all when none),
    INT8 once per conversion asked for (``int8-<conversion>``), the rest with the defaults; then
    each of those again with ``CudaTuning.norm_in_gemv_max_k`` at every value of ``norm_max_ks``
    (``<label>-norm<value>``) and with ``CudaTuning.merge_max_k`` at every value of
    ``merge_max_ks`` (``<label>-merge<value>``)."""
    base = []
    for quantization in QUANTIZATIONS:
        if weights and _label(quantization) not in weights:
            continue
        if quantization != "int8" or not int8_converts:
            base.append((_label(quantization), quantization, DEFAULT_TUNING))
            continue
        for c in int8_converts:
            base.append(
                (f"int8-{c}", quantization, replace(DEFAULT_TUNING, int8_convert=cast(Int8Convert, c)))
            )
    variants = []
    for label, quantization, tuning in base:
        variants.append((label, quantization, tuning))
        variants += [
            (f"{label}-norm{k}", quantization, replace(tuning, norm_in_gemv_max_k=k)) for k in norm_max_ks
        ]
        variants += [
            (f"{label}-merge{k}", quantization, replace(tuning, merge_max_k=k)) for k in merge_max_ks
        ]
    return variants


def run_decode(
    workdir: Path,
    weights: tuple[str, ...] = (),
    int8_converts: tuple[str, ...] = (),
    norm_max_ks: tuple[int, ...] = (),
    merge_max_ks: tuple[int, ...] = (),
) -> dict[str, Any]:
    """``weights``: the labels to time (bf16, fp8, int8); all when empty. ``int8_converts``: the
    ``CudaTuning.int8_convert`` values INT8 is timed with, one decode each; the default when empty.
    ``norm_max_ks``: every variant timed again, in the same process, with
    ``CudaTuning.norm_in_gemv_max_k`` at each value (1024: Llama-3-8B's 4,096-wide norms run the
    norm kernel). ``merge_max_ks``: the same with ``CudaTuning.merge_max_k`` (4096: Llama-3-8B's
    o_proj merges attention's partials in its loads)."""
    random.seed(0)
    prompt = [random.randint(2, 10000) for _ in range(PROMPT_LEN)]
    warm = [random.randint(2, 10000) for _ in range(PROMPT_LEN)]
    hf = _hf_model("llama3-8b")
    path = workdir / "llama3-8b"
    _save(hf, path)
    kv_bytes = _floor(hf, PROMPT_LEN + NEW_TOKENS // 2)["kv_bytes_per_token"]
    del hf
    _free_gpu()
    result: dict[str, Any] = {"shape": "llama3-8b", "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS,
                              "norm_in_gemv_max_k": DEFAULT_TUNING.norm_in_gemv_max_k}  # fmt: skip
    stored: dict[str | None, dict[str, Any]] = {}
    for label, quantization, tuning in _decode_variants(weights, int8_converts, norm_max_ks, merge_max_ks):
        if quantization not in stored:
            stored[quantization] = _safe(lambda q=quantization: _stored_weight_bytes(path, q))
        entry: dict[str, Any] = dict(stored[quantization])
        timed = _safe(lambda q=quantization, t=tuning: _decode_variant(path, prompt, warm, t,
                                                                       profile=True, quantization=q))  # fmt: skip
        _free_gpu()
        entry.update(_with_floor(timed, entry.get("weight_bytes"), kv_bytes))
        result[label] = entry
    return result


def _memory(path: Path, quantization: str | None, kv_cache_dtype: str) -> dict[str, Any]:
    """The model's GPU bytes and the KV pool the engine sizes by default after loading it."""
    import torch

    from engine import LLM

    _free_gpu()
    before = torch.cuda.memory_allocated()
    llm = LLM(str(path), dtype="bfloat16", device="cuda", max_num_seqs=4096, cuda_graphs=False,
              quantization=quantization, kv_cache_dtype=kv_cache_dtype)  # fmt: skip
    engine = llm.engine
    model = engine.models[llm.model_names[0]].model
    pool = engine.kv_cache.buffer.numel()
    blocks = engine.stats()["blocks_total"]
    out = {
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "model_allocated_bytes": torch.cuda.memory_allocated() - before - pool,
        "kv_pool_bytes": pool,
        "kv_blocks": blocks,
        "kv_block_bytes": engine.kv_cache.block_bytes,
        "kv_tokens": int(blocks) * engine.config.block_size,
    }
    del llm, engine, model
    _free_gpu()
    return out


def _throughput_variants(
    labels: tuple[str, ...], max_rows: tuple[int, ...] = ()
) -> list[tuple[str, str | None, str, CudaTuning]]:
    """(label, quantization, kv_cache_dtype, tuning) of each throughput run: the labels asked for
    (all when none) with the default tuning, then each quantized one again with
    ``CudaTuning.quant_gemv_max_rows`` at every value of ``max_rows`` (``<label>-rows<value>``:
    batches above it take ``torch._scaled_mm``'s FP8 tensor cores instead of ``quant_gemv``)."""
    chosen = [v for v in THROUGHPUT_VARIANTS if not labels or v[0] in labels]
    out = [(label, q, kv, DEFAULT_TUNING) for label, q, kv in chosen]
    for rows in max_rows:
        out += [(f"{label}-rows{rows}", q, kv, replace(DEFAULT_TUNING, quant_gemv_max_rows=rows))
                for label, q, kv in chosen if q is not None]  # fmt: skip
    return out


def run_throughputs(
    workdir: Path,
    scale: float,
    labels: tuple[str, ...] = (),
    *,
    memory: bool = True,
    shape: str = "qwen3-0.6b",
    max_rows: tuple[int, ...] = (),
    on_result: Callable[[dict[str, Any]], None] = lambda _: None,
) -> dict[str, Any]:
    """``on_result(out)`` after every variant: a run cut short by its time limit keeps the rest."""
    from bench.engine.random_model import build_random_qwen3

    path = workdir / shape
    if shape == "llama3-8b":  # weights 16 GB in bf16: what FP8 halves is a large part of a step
        hf = _hf_model(shape)
        _save(hf, path)
        del hf
        _free_gpu()
    else:
        build_random_qwen3(path, shape=shape, dtype="bfloat16", device="cuda")
    out: dict[str, Any] = {"shape": shape}
    for label, quantization, kv, tuning in _throughput_variants(labels, max_rows):
        entry: dict[str, Any] = {}
        if memory and tuning is DEFAULT_TUNING:  # another load of the model: the same at every scale
            entry["memory"] = _safe(lambda q=quantization, k=kv: _memory(path, q, k))
        entry.update(_safe(lambda q=quantization, k=kv, t=tuning: run_throughput(
            workdir, scale, variants=False, tuning=t, quantization=q, kv_cache_dtype=k, profile=False,
            model_dir=shape)))  # fmt: skip
        out[label] = entry
        _free_gpu()
        base = out.get("bf16", {}).get("output_tok_s")
        for entry in out.values():
            if base and isinstance(entry, dict) and "output_tok_s" in entry:
                entry["speedup_vs_bf16"] = entry["output_tok_s"] / base
        on_result(out)
    return out


def _progress(target: Path, report: dict[str, Any], throughput: dict[str, Any]) -> None:
    """The report so far, on disk and one line per variant on stdout."""
    target.write_text(json.dumps(report | {"throughput": throughput}, indent=2, default=str))
    figures = {k: (v.get("output_tok_s"), v.get("speedup_vs_bf16"), v.get("error"))
               for k, v in throughput.items() if isinstance(v, dict)}  # fmt: skip
    click.echo(f"throughput so far: {figures}", err=True)


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--throughput-scale", type=float, default=1.0, show_default=True)
@click.option("--skip", multiple=True, type=click.Choice(["decode", "throughput", "memory"]))
@click.option(
    "--decode-weights",
    multiple=True,
    type=click.Choice(["bf16", "fp8", "int8"]),
    help="Weights timed in the decode stage (repeat; default: all).",
)
@click.option("--int8-convert", "int8_converts", multiple=True, type=click.Choice(get_args(Int8Convert)),
              help="Time INT8 decode once per conversion given (repeat; default: the tuning's).")  # fmt: skip
@click.option("--norm-in-gemv-max-k", "norm_max_ks", multiple=True, type=click.IntRange(min=0),
              help="Also time the decode stage with CudaTuning.norm_in_gemv_max_k at this value, in the "
                   "same call (repeat; 1024: no norm fused at Llama-3-8B's hidden 4,096).")  # fmt: skip
@click.option("--merge-max-k", "merge_max_ks", multiple=True, type=click.IntRange(min=0),
              help="Also time the decode stage with CudaTuning.merge_max_k at this value, in the same "
                   "call (repeat; 4096: Llama-3-8B's o_proj merges the attention partials).")  # fmt: skip
@click.option("--throughput-variant", "throughput_variants", multiple=True,
              type=click.Choice([label for label, _, _ in THROUGHPUT_VARIANTS]),
              help="Variants of the throughput stage (repeat; default: all).")  # fmt: skip
@click.option("--quant-gemv-max-rows", "max_rows", multiple=True, type=click.IntRange(min=0),
              help="Also run each quantized throughput variant with CudaTuning.quant_gemv_max_rows "
                   "at this value (repeat).")  # fmt: skip
@click.option("--throughput-shape", type=click.Choice(["qwen3-0.6b", "llama3-8b"]), default="qwen3-0.6b",
              show_default=True, help="The model shape of the throughput stage (random weights).")  # fmt: skip
def main(
    out_dir: Path,
    throughput_scale: float,
    skip: tuple[str, ...],
    decode_weights: tuple[str, ...],
    int8_converts: tuple[str, ...],
    norm_max_ks: tuple[int, ...],
    merge_max_ks: tuple[int, ...],
    throughput_variants: tuple[str, ...],
    throughput_shape: str,
    max_rows: tuple[int, ...],
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"provenance": provenance(sys.argv, "cuda")}
    target = out_dir / "quantization.json"
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        workdir = Path(tmp)
        for stage, fn in (
            ("decode", lambda w: run_decode(w, decode_weights, int8_converts, norm_max_ks, merge_max_ks)),
            (
                "throughput",
                lambda w: run_throughputs(
                    w,
                    throughput_scale,
                    throughput_variants,
                    memory="memory" not in skip,
                    shape=throughput_shape,
                    max_rows=max_rows,
                    on_result=lambda partial: _progress(target, report, partial),
                ),
            ),
        ):
            if stage in skip:
                continue
            started = time.perf_counter()
            report[stage] = _safe(lambda f=fn: f(workdir))
            report[f"{stage}_s"] = time.perf_counter() - started
            target.write_text(json.dumps(report, indent=2, default=str))
    click.echo(json.dumps(report, indent=2, default=str)[:4000])


if __name__ == "__main__":
    main()
