"""Shared KV pool vs a static per-model split of the same memory, under load that shifts models.

Two tiny Llama checkpoints; model A gets a burst of requests first, model B a burst once A's is
under way. "shared" is one engine hosting both over one pool; "static" is two engines, each with
half the pool, stepped in turn. Same arrivals (by step), same token totals; we report throughput,
steps and preemptions. Run: ``python -m bench.engine_multimodel [--out bench/results/...json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.provenance import provenance
from engine.config import EngineConfig, ModelSpec
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 16
NUM_BLOCKS = 48
PER_MODEL = 8
PROMPT_LEN = 32
MAX_TOKENS = 64
B_ARRIVES_AT_STEP = 60


def _write_models(root: Path) -> dict[str, Path]:
    from engine.demo import DEMO_MODELS, write_demo_model

    names = list(DEMO_MODELS)[:2]
    return {key: write_demo_model(name, root / name) for key, name in zip("ab", names, strict=True)}


def _engine(paths: dict[str, Path], num_blocks: int) -> LLMEngine:
    specs = tuple(ModelSpec(name=k, path=str(p)) for k, p in paths.items())
    probe = LLMEngine(EngineConfig(models=specs, block_size=BLOCK_SIZE, kv_cache_bytes=1 << 16))
    block_bytes = probe.kv_cache.block_bytes
    del probe
    return LLMEngine(
        EngineConfig(
            models=specs, block_size=BLOCK_SIZE, kv_cache_bytes=num_blocks * block_bytes, max_num_seqs=32
        )
    )


def _requests(model: str) -> list[tuple[str, list[int]]]:
    g = torch.Generator().manual_seed(ord(model))
    return [
        (f"{model}{i}", torch.randint(3, 200, (PROMPT_LEN,), generator=g).tolist()) for i in range(PER_MODEL)
    ]


def _drive(engines: dict[str, LLMEngine]) -> dict[str, float]:
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for rid, prompt in _requests("a"):
        engines["a"].add_request(rid, "a", prompt, params)
    tokens, steps, b_added = 0, 0, False
    start = time.perf_counter()
    unique = list({id(e): e for e in engines.values()}.values())
    while any(e.has_work for e in unique) or not b_added:
        if steps == B_ARRIVES_AT_STEP and not b_added:
            for rid, prompt in _requests("b"):
                engines["b"].add_request(rid, "b", prompt, params)
            b_added = True
        for e in unique:
            if e.has_work:
                tokens += sum(len(d.token_ids) for _, d in e.step())
        steps += 1
    elapsed = time.perf_counter() - start
    return {
        "output_tokens": tokens,
        "seconds": round(elapsed, 3),
        "output_tok_per_s": round(tokens / elapsed, 1),
        "steps": steps,
        "preemptions": sum(e.scheduler.num_preemptions for e in unique),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results/engine_multimodel_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write_models(Path(tmp))
        shared = _engine(paths, NUM_BLOCKS)
        shared_result = _drive({"a": shared, "b": shared})
        split = {k: _engine({k: p}, NUM_BLOCKS // 2) for k, p in paths.items()}
        static_result = _drive(split)
    result = {
        "workload": {
            "block_size": BLOCK_SIZE,
            "pool_blocks": NUM_BLOCKS,
            "requests_per_model": PER_MODEL,
            "prompt_len": PROMPT_LEN,
            "max_tokens": MAX_TOKENS,
            "b_arrives_at_step": B_ARRIVES_AT_STEP,
            "device": "cpu",
            "torch_threads": torch.get_num_threads(),
        },
        "shared_pool": shared_result,
        "static_split": static_result,
        "speedup": round(shared_result["output_tok_per_s"] / static_result["output_tok_per_s"], 3),
        "step_ratio": round(static_result["steps"] / shared_result["steps"], 3),
        **provenance(sys.argv, "cpu"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
