"""Time to first token of one short request through ``LLM.generate`` on a GPU, and where it goes.

A random Qwen3-0.6B-shaped checkpoint (bf16); each run a fresh 128-token prompt (no prefix-cache
hit) and one new token. Reports the median over ``--runs``, then the same call split by timing
the engine's phases with a device sync after each (model forward, sampling, the rest of the
step), and the top CUDA kernels and CPU ops of a profiled call. HF ``generate`` of one token on
the same prompt is the peer.

    python -m bench.engine.first_token --out $OUT [--runs 20]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from bench.provenance import provenance

PROMPT_LEN = 128


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any]) -> float:
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - start


def _phases(llm: Any, prompts: list[list[int]]) -> dict[str, float]:
    """Median ms per request of the runner's forward and the sampler, synced, and of the whole call."""
    from engine import SamplingParams

    core = llm.engine
    spent: dict[str, list[float]] = {"forward": [], "sample": []}

    def wrap(owner: Any, name: str, key: str) -> Callable[[], None]:
        original = getattr(owner, name)

        def timed(*args: Any, **kw: Any) -> Any:
            _sync()
            start = time.perf_counter()
            out = original(*args, **kw)
            _sync()
            spent[key].append(time.perf_counter() - start)
            return out

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, original)

    runner = next(iter(core.runners.values()))
    undo = [wrap(runner, "execute", "forward"), wrap(core, "sampler", "sample")]
    totals = []
    try:
        for prompt in prompts:
            totals.append(
                _timed(lambda p=prompt: llm.generate([p], SamplingParams(temperature=0, max_tokens=1)))
            )
    finally:
        for u in undo:
            u()
    return {
        "total_ms": statistics.median(totals) * 1e3,
        "forward_ms": statistics.median(spent["forward"]) * 1e3,
        "sample_ms": statistics.median(spent["sample"]) * 1e3 if spent["sample"] else 0.0,
    }


def _profile(llm: Any, prompts: list[list[int]]) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine import SamplingParams

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for prompt in prompts:
            llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1))
        _sync()
    events = prof.key_averages()
    n = len(prompts)
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.self_device_time_total for e in kernels) / n
    launches = (
        sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
        / n
    )
    top_gpu = sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]
    top_cpu = sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
    return {
        "gpu_kernel_ms_per_request": gpu_us / 1e3,
        "kernel_launches_per_request": launches,
        "top_gpu_kernels_us": {e.key[:80]: round(e.self_device_time_total / n, 1) for e in top_gpu},
        "top_cpu_ops_us": {e.key[:80]: round(e.self_cpu_time_total / n, 1) for e in top_cpu},
    }


def _hf_first_token(path: Path, prompts: list[list[int]]) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    times = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device="cuda")
        with torch.inference_mode():
            times.append(
                _timed(lambda i=ids: model.generate(i, max_new_tokens=1, do_sample=False, pad_token_id=0))
            )
    return statistics.median(times[2:]) * 1e3


def _ours(path: Path, runs: int, prompts: Callable[[int], list[list[int]]], device: str) -> dict[str, Any]:
    from engine import LLM, SamplingParams

    dtype = "bfloat16" if device == "cuda" else "float32"
    llm = LLM(str(path), dtype=dtype, device=device, kv_cache_bytes=1 << 30, max_num_seqs=8)

    def one(prompt: list[int]) -> None:
        llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1))

    for p in prompts(5):  # compile every prefill kernel variant this length needs
        one(p)
    ttft = [_timed(lambda p=p: one(p)) for p in prompts(runs)]
    return {
        "prompt_len": PROMPT_LEN,
        "runs": runs,
        "ours_ttft_ms_median": statistics.median(ttft) * 1e3,
        "ours_ttft_ms_min": min(ttft) * 1e3,
        "phases": _phases(llm, prompts(10)),
        "profile": _profile(llm, prompts(5)),
    }


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--runs", type=int, default=20, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/tmp/strongroom-first-token"))
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
@click.option("--shape", type=click.Choice(["qwen3-0.6b", "tiny"]), default="qwen3-0.6b", show_default=True)
@click.option("--no-peer", is_flag=True, help="skip HF generate")
def main(out_dir: Path, runs: int, workdir: Path, device: str, shape: str, no_peer: bool) -> None:
    from bench.engine.random_model import build_random_qwen3

    rng = random.Random(0)

    def prompts(k: int) -> list[list[int]]:
        return [[rng.randint(2, 10000) for _ in range(PROMPT_LEN)] for _ in range(k)]

    dtype = "bfloat16" if device == "cuda" else "float32"
    path = build_random_qwen3(workdir / shape, shape=shape, dtype=dtype, device=device)
    report = _ours(path, runs, prompts, device)
    if not no_peer:
        report["hf_generate_one_token_ms"] = _hf_first_token(path, prompts(12))
    report["provenance"] = provenance(sys.argv, "cuda")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "first_token.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
