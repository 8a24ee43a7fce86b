"""The GPU engine benchmark, one device call: gpu tests, batch-1 decode, throughput.

    python -m bench.gpu_engine --out $OUT                     # everything, on the H200
    python -m bench.gpu_engine --out $OUT --skip llama3-8b --throughput-scale 0.25

Stages, each appended to ``gpu_engine.json`` as soon as it finishes (a timeout keeps what ran):

1. ``pytest -m gpu`` over the kernel tests and the CUDA exactness test.
2. Batch-1 decode (random weights, bf16, prompt 128, 256 new tokens, EOS ignored, greedy) for
   the Qwen3-0.6B and Llama-3-8B shapes: ours with CUDA graphs, ours eager, HF ``generate``; the
   memory-bandwidth floor (weights + KV read per token at the measured 4.27 TB/s) and MBU.
   A torch.profiler pass over a few decode steps splits each token's time into GPU kernel time
   and the rest (launch gaps, Python).
3. Throughput on nano-vllm's workload (``--throughput-scale``), ours only (HF's 614 tok/s is in
   bench/ANCHORS.md, measured on the same machine).
"""

from __future__ import annotations

import gc
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from bench.engine.bandwidth import COPY_BANDWIDTH
from bench.engine.graph_profile import VARIANTS
from bench.provenance import provenance
from engine.tuning import DEFAULT_TUNING, CudaTuning

PROMPT_LEN, NEW_TOKENS = 128, 256

LLAMA3_8B: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def _hf_model(shape: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from bench.engine.random_model import _COMMON, SHAPES

    torch.manual_seed(0)
    if shape == "llama3-8b":
        config: Any = LlamaConfig(**LLAMA3_8B, bos_token_id=0, eos_token_id=1)
        cls: Any = LlamaForCausalLM
    else:
        fields = {**_COMMON, **SHAPES["qwen3-0.6b"]}
        config = Qwen3Config(**fields, bos_token_id=0, eos_token_id=1)
        cls = Qwen3ForCausalLM
    with torch.device("cuda"):
        model = cls(config).to(torch.bfloat16)
    return model.eval()


def _save(model: Any, path: Path) -> None:
    from bench.engine.random_model import _write_tokenizer

    model.save_pretrained(path)
    _write_tokenizer(path, int(model.config.vocab_size))


def _floor(model: Any, context: int) -> dict[str, float]:
    c = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = c.num_hidden_layers * 2 * c.num_key_value_heads * head_dim * 2 * context
    return {
        "weight_bytes": weights,
        "kv_bytes_per_token": kv,
        "floor_ms": (weights + kv) / COPY_BANDWIDTH * 1e3,
    }


def run_hf(model: Any, prompt: list[int]) -> dict[str, float]:
    import torch

    ids = torch.tensor([prompt], device="cuda")

    def generate(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
            )
        torch.cuda.synchronize()
        assert out.shape[1] == len(prompt) + n
        return time.perf_counter() - start

    generate(4)
    first, full = generate(1), generate(NEW_TOKENS)
    return {
        "decode_tok_s": (NEW_TOKENS - 1) / (full - first),
        "e2e_tok_s": NEW_TOKENS / full,
        "ttft_s": first,
    }


def _generate_timed(
    engine: Any, model: str, prompt: list[int], tag: str, new_tokens: int = NEW_TOKENS
) -> dict[str, float]:
    import torch

    from engine import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    engine.add_request(tag, model, prompt, params)
    torch.cuda.synchronize()
    waited = engine.device_wait_s
    start = time.perf_counter()
    first = None
    tokens = 0
    reason = None
    others: dict[str, int] = {}
    while engine.has_work:
        for rid, delta in engine.step():
            if rid != tag:
                others[rid] = others.get(rid, 0) + len(delta.token_ids)
                continue
            tokens += len(delta.token_ids)
            reason = delta.finish_reason or reason
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    if tokens != new_tokens or first is None:
        raise RuntimeError(
            f"{tag}: {tokens} of {new_tokens} tokens, finish {reason}, other requests {others}, "
            f"stats {engine.stats()}"
        )
    return {
        "decode_tok_s": (new_tokens - 1) / (end - first),
        "e2e_tok_s": new_tokens / (end - start),
        "ttft_s": first - start,
        # Host time per token spent waiting for the GPU; the rest of a token's time is host work.
        "host_wait_ms_per_token": (engine.device_wait_s - waited) / new_tokens * 1e3,
    }


def _profile(engine: Any, model: str, prompt: list[int], steps: int = 24) -> dict[str, Any]:
    """Batch-1 decode: GPU kernel time per step vs wall time per step, and the top kernels."""
    from engine import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True)
    engine.add_request("profile", model, prompt, params)
    for _ in range(4):
        engine.step()
    result = _profile_steps(engine, steps)
    while engine.has_work:
        engine.step()
    return result


def _profile_steps(engine: Any, steps: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    kernels = [e for e in events if e.device_type.name == "CUDA"] or events
    gpu_us = sum(e.self_device_time_total for e in kernels)
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]
    return {
        "wall_ms_per_step": wall / steps * 1e3,
        "gpu_kernel_ms_per_step": gpu_us / steps / 1e3,
        "gpu_busy_fraction": gpu_us / 1e6 / wall,
        "top_kernels": [
            {"name": e.key[:90], "ms_per_step": e.self_device_time_total / steps / 1e3, "count": e.count}
            for e in top
        ],
    }


def _profile_big_batch(engine: Any, model: str, num_seqs: int = 256, context: int = 1024) -> dict[str, Any]:
    """Decode at num_seqs sequences of ~context tokens: where a throughput step's time goes."""
    from engine import SamplingParams

    rng = random.Random(1)
    params = SamplingParams(temperature=0.6, max_tokens=48, ignore_eos=True)
    for i in range(num_seqs):
        engine.add_request(f"big-{i}", model, [rng.randint(2, 10000) for _ in range(context)], params)
    while engine.scheduler.num_waiting or engine.num_steps < 3:
        engine.step()
    for _ in range(3):
        engine.step()
    result = _profile_steps(engine, 8)
    result["num_running"] = engine.scheduler.num_running
    while engine.has_work:
        engine.step()
    return result


def run_decode(
    shape: str, workdir: Path, variants: bool = True, peer: bool = True, tuning: CudaTuning = DEFAULT_TUNING
) -> dict[str, Any]:
    import torch

    random.seed(0)
    prompt = [random.randint(2, 10000) for _ in range(PROMPT_LEN)]
    # Same length (the same Triton kernel variants get compiled), other ids (no prefix-cache hit).
    warm = [random.randint(2, 10000) for _ in range(PROMPT_LEN)]
    t0 = time.perf_counter()
    hf = _hf_model(shape)
    path = workdir / shape
    _save(hf, path)
    floor = _floor(hf, PROMPT_LEN + NEW_TOKENS // 2)
    result: dict[str, Any] = {"shape": shape, "prompt_len": PROMPT_LEN, "new_tokens": NEW_TOKENS, **floor}
    if peer:
        result["hf_generate"] = run_hf(hf, prompt)
    del hf
    _free_gpu()
    result["build_s"] = time.perf_counter() - t0
    # The default: CUDA graphs, async scheduling, skinny GEMM, programmatic dependent launch.
    result.update(_decode_variant(path, prompt, warm, tuning, profile=True, sync=True, eager=variants))
    _free_gpu()
    if variants:
        # Each variant builds its own engine, so its graphs are captured with its kernels.
        result["ours_graphs_no_pdl"] = _safe(lambda: _with_flag("pdl_off", path, prompt, warm))
        _free_gpu()
        result["ours_graphs_cublas"] = _safe(lambda: _with_flag("cublas_gemms", path, prompt, warm))
        _free_gpu()
    for key in ("ours_graphs", "ours_graphs_sync", "ours_graphs_no_pdl", "ours_graphs_cublas", "ours_eager",
                "hf_generate"):  # fmt: skip
        if "decode_tok_s" not in result.get(key, {}):
            continue
        ms = 1e3 / result[key]["decode_tok_s"]
        result[key]["ms_per_token"] = ms
        result[key]["mbu"] = floor["floor_ms"] / ms
    torch.cuda.synchronize()
    return result


def _decode_variant(
    path: Path,
    prompt: list[int],
    warm: list[int],
    tuning: CudaTuning,
    *,
    profile: bool,
    sync: bool = False,
    eager: bool = False,
    quantization: str | None = None,
) -> dict[str, Any]:
    from engine import LLM

    llm = LLM(
        str(path),
        dtype="bfloat16",
        device="cuda",
        kv_cache_bytes=4 << 30,
        max_num_seqs=8,
        tuning=tuning,
        quantization=quantization,
    )
    engine, name = llm.engine, llm.model_names[0]
    out: dict[str, Any] = {}
    _generate_timed(engine, name, warm, "warmup", 8)
    out["ours_graphs"] = _generate_timed(engine, name, prompt, "graphs")
    if profile:
        out["ours_graphs_profile"] = _safe(lambda: _profile(engine, name, prompt))
    if sync:
        engine.async_scheduling = False
        out["ours_graphs_sync"] = _generate_timed(engine, name, prompt, "graphs-sync")
        engine.async_scheduling = True
    if eager:
        runner = engine.runners[name]
        runner.graphs = None
        _generate_timed(engine, name, warm[::-1], "warmup-eager", 8)
        out["ours_eager"] = _generate_timed(engine, name, prompt, "eager")
    return out  # the engine goes with this frame; callers free the GPU cache after


def _with_flag(variant: str, path: Path, prompt: list[int], warm: list[int]) -> dict[str, Any]:
    """The default decode under one ``bench.engine.graph_profile`` variant's tuning: ``pdl_off`` (plain
    launches) or ``cublas_gemms`` (F.linear)."""
    out = _decode_variant(path, prompt, warm[1:] + warm[:1], VARIANTS[variant], profile=True)
    timed: dict[str, Any] = out["ours_graphs"]
    timed["profile"] = out.get("ours_graphs_profile")
    return timed


def run_throughput(
    workdir: Path,
    scale: float,
    variants: bool = True,
    tuning: CudaTuning = DEFAULT_TUNING,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    profile: bool = True,
    model_dir: str = "qwen3-0.6b",
) -> dict[str, Any]:
    """The nano-vllm workload through ``LLM`` on the checkpoint in ``workdir / model_dir``."""
    import torch

    from bench.engine.throughput import _result
    from bench.engine.workload import nano_vllm_workload
    from engine import LLM, SamplingParams

    workload = nano_vllm_workload().scaled(scale)
    path = workdir / model_dir
    llm = LLM(
        str(path),
        dtype="bfloat16",
        device="cuda",
        kv_cache_bytes=48 << 30,
        max_num_seqs=256,
        max_num_batched_tokens=16384,
        tuning=tuning,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
    )
    engine, name = llm.engine, llm.model_names[0]

    def generate(prompts: list[list[int]], max_tokens: list[int], tag: str, text: str = "final") -> int:
        # "final": text decoded once per sequence at its end, as LLM.generate does (and
        # nano-vllm's bench); "delta": detokenized every step, as a streaming server does.
        for i, (prompt, m) in enumerate(zip(prompts, max_tokens, strict=True)):
            params = SamplingParams(
                temperature=workload.temperature, ignore_eos=True, max_tokens=m, output_text=text
            )
            engine.add_request(f"{tag}-{i}", name, prompt, params)
        num_output = 0
        while engine.has_work:
            for _, delta in engine.step():
                num_output += len(delta.token_ids)
        return num_output

    # Warm-up: the prefill variants (every decode bucket was captured at start-up); 64-token
    # prefixes left longer prefills' to compile in the timed run (bench/BENCHMARKS.md, 2026-12-04).
    warm = workload.warm_up()
    generate(warm.prompt_token_ids, warm.max_tokens, "warm")
    torch.cuda.synchronize()
    steps0, wait0 = engine.num_steps, engine.device_wait_s
    start = time.perf_counter()
    num_output = generate(workload.prompt_token_ids, workload.max_tokens, "run")
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    waited = engine.device_wait_s - wait0
    result = {
        "scale": scale,
        "steps": engine.num_steps - steps0,
        **asdict(_result("ours", workload, elapsed, num_output)),
        # Host waiting for tokens = the GPU ahead of the host; the rest is host work the GPU
        # may have waited on (with async scheduling, only where a step's host work > GPU time).
        "host_wait_s": waited,
        "host_busy_s": elapsed - waited,
        "kv_blocks": engine.stats()["blocks_total"],
        "kv_block_bytes": engine.kv_cache.block_bytes,
    }
    if variants:
        torch.cuda.synchronize()
        start, wait0 = time.perf_counter(), engine.device_wait_s
        num_output = generate(workload.prompt_token_ids, workload.max_tokens, "delta", text="delta")
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        result["text_per_step"] = {
            "output_tok_s": num_output / elapsed,
            "elapsed_s": elapsed,
            "host_wait_s": engine.device_wait_s - wait0,
        }
    if profile:
        result["profile_phases"] = _safe(lambda: _profile_phases(engine, name, workload))
        result["profile_256x1024"] = _safe(lambda: _profile_big_batch(engine, name))
    return result


def _profile_phases(
    engine: Any, model: str, workload: Any, at: tuple[int, ...] = (40, 300, 600, 850)
) -> dict[str, Any]:
    """The same workload again, with a profiler window of a few steps at several points."""
    from engine import SamplingParams

    for i, (prompt, m) in enumerate(zip(workload.prompt_token_ids, workload.max_tokens, strict=True)):
        params = SamplingParams(
            temperature=workload.temperature, ignore_eos=True, max_tokens=m, output_text="final"
        )
        engine.add_request(f"phase-{i}", model, prompt, params)
    first = engine.num_steps
    phases: dict[str, Any] = {}
    while engine.has_work:
        step = engine.num_steps - first
        if step in at:
            running = engine.scheduler.num_running
            phases[f"step_{step}"] = {"num_running": running, **_profile_steps(engine, 6)}
        else:
            engine.step()
    return phases


def _multimodel(workdir: Path) -> dict[str, Any]:
    from bench import engine_multimodel

    return engine_multimodel.run("cuda", "qwen3-0.6b", workdir=workdir)


def _attention_sweep() -> dict[str, Any]:
    from bench.engine.attention_sweep import run

    return run()


def _free_gpu() -> None:
    import torch

    gc.collect()
    torch.cuda.empty_cache()


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # a profiler failure must not lose the timings
        import traceback

        return {"error": repr(exc), "traceback": traceback.format_exc()[-3000:]}


def _run_tests(out: Path, paths: tuple[str, ...]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *paths]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    return {
        "command": " ".join(cmd),
        "returncode": proc.returncode,
        "summary": tail,
        "s": time.perf_counter() - start,
    }


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option(
    "--skip",
    multiple=True,
    help="stages to skip: tests, attention, qwen3-0.6b, throughput, multimodel, llama3-8b",
)
@click.option(
    "--tests",
    "test_paths",
    multiple=True,
    default=("tests/unit/engine/kernels", "tests/unit/engine/test_cuda.py"),
    show_default=True,
)
@click.option("--throughput-scale", type=float, default=1.0, show_default=True)
@click.option(
    "--no-variants", is_flag=True, help="the default configuration only (batch-1 decode, throughput)"
)
@click.option(
    "--no-peer", is_flag=True, help="batch-1 decode without HF generate beside it (a re-measure of ours)"
)
@click.option("--workdir", type=click.Path(path_type=Path), default=None, help="checkpoints; default RAM")
@click.option(
    "--flags",
    "flag_variant",
    type=click.Choice(list(VARIANTS)),
    default="default",
    show_default=True,
    help="a bench.engine.graph_profile variant whose tuning the decode and throughput runs take (a candidate default)",
)
def main(
    out_dir: Path,
    skip: tuple[str, ...],
    test_paths: tuple[str, ...],
    throughput_scale: float,
    no_variants: bool,
    no_peer: bool,
    workdir: Path | None,
    flag_variant: str,
) -> None:
    tuning = VARIANTS[flag_variant]
    if workdir is None:
        in_ram = shutil.disk_usage("/dev/shm").free > 40 << 30 if Path("/dev/shm").is_dir() else False
        workdir = Path("/dev/shm" if in_ram else tempfile.gettempdir()) / "strongroom-bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"provenance": provenance(sys.argv, "cuda"), "stages": {}}
    target = out_dir / "gpu_engine.json"

    def stage(name: str, fn: Any) -> None:
        if name in skip:
            return
        start = time.perf_counter()
        report["stages"][name] = _safe(fn)
        report["stages"][name]["stage_s"] = round(time.perf_counter() - start, 1)
        _free_gpu()
        target.write_text(json.dumps(report, indent=2, default=str))
        print(f"== {name}: {json.dumps(report['stages'][name], default=str)[:1500]}", flush=True)

    stage("tests", lambda: _run_tests(out_dir, test_paths))
    stage("attention", _attention_sweep)
    stage(
        "qwen3-0.6b",
        lambda: run_decode("qwen3-0.6b", workdir, variants=not no_variants, peer=not no_peer, tuning=tuning),
    )
    if "throughput" not in skip and not (workdir / "qwen3-0.6b").exists():
        _save(_hf_model("qwen3-0.6b"), workdir / "qwen3-0.6b")
    stage(
        "throughput",
        lambda: run_throughput(workdir, throughput_scale, variants=not no_variants, tuning=tuning),
    )
    stage("multimodel", lambda: _multimodel(workdir))
    stage(
        "llama3-8b", lambda: run_decode("llama3-8b", workdir, variants=False, peer=not no_peer, tuning=tuning)
    )
    _print_table(report)


def _print_table(report: dict[str, Any]) -> None:
    for shape in ("qwen3-0.6b", "llama3-8b"):
        r = report["stages"].get(shape)
        if not r or "error" in r:
            continue
        print(f"{shape}: floor {r['floor_ms']:.3f} ms/token ({1e3 / r['floor_ms']:.0f} tok/s)")
        for key in ("ours_graphs", "ours_graphs_sync", "ours_graphs_no_pdl", "ours_graphs_cublas", "ours_eager",
                    "hf_generate"):  # fmt: skip
            x = r.get(key, {})
            if "mbu" not in x:
                continue
            print(
                f"  {key:12s} {x['decode_tok_s']:8.1f} tok/s  {x['ms_per_token']:.3f} ms  MBU {x['mbu']:.2f}"
            )
    t = report["stages"].get("throughput")
    if t and "error" not in t:
        print(
            f"throughput (scale {t['scale']}): {t.get('output_tok_s')} output tok/s, "
            f"{t.get('num_output_tokens')} tokens, {t.get('steps')} steps, host waited "
            f"{t.get('host_wait_s', 0):.2f} s of {t.get('elapsed_s', 0):.2f}"
        )
        for key, phase in (t.get("profile_phases") or {}).items():
            if isinstance(phase, dict) and "wall_ms_per_step" in phase:
                print(
                    f"  {key}: {phase['num_running']} running, wall {phase['wall_ms_per_step']:.2f} ms, "
                    f"GPU {phase['gpu_kernel_ms_per_step']:.2f} ms/step"
                )


if __name__ == "__main__":
    main()
