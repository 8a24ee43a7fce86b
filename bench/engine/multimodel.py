"""Shared KV pool vs a static per-model split of the same memory, under load that shifts models.

``k`` models (2 or 3); load moves between them in phases: model ``a`` gets a burst of requests
at round 0, ``b`` a burst at round ``phase_steps``, ``c`` at ``2 * phase_steps``; the models not
bursting idle (or get a light trickle, ``background``). "shared" is one engine hosting all ``k``
over one pool; "static" is ``k`` engines, each with ``1/k`` of the pool's blocks, stepped in turn
(one *round* steps every engine that has work). The pool is ``pool_factor`` times one burst's peak KV
need, so under the static split the bursting model holds only ``pool_factor / k`` of its burst
and queues or preempts while the other shares idle; the shared pool serves the whole burst.
The plan (KV bytes per token, a burst's peak need, pool and share sizes) is printed first.

Both systems see the same requests, arriving at the same round, with the same prompts and
``max_tokens`` (EOS ignored, greedy), and each is warmed up before timing; the totals are checked.
A request's latency runs from the round (and the moment) it is added to the round (and moment)
its last token comes back; ``steps`` counts rounds (idle ones before an arrival included),
``engine_steps`` every engine's steps.
The shared engine gets the static engines' slots and token budget summed (``k * max_num_seqs``,
``k * max_num_batched_tokens``), so a round of either has the same caps; CUDA graphs and
asynchronous scheduling are whatever ``EngineConfig`` defaults to, the same for both.

Shapes: ``demo`` (the two tiny demo Llamas; CPU, the original workload), ``tiny`` (random tiny
Qwen3s; CPU smoke test of the GPU path), ``qwen3-0.6b`` (random Qwen3-0.6B, bf16; H200).

    python -m bench.engine.multimodel                                    # CPU, demo models
    python -m bench.engine.multimodel --device cuda --shape qwen3-0.6b --workdir /dev/shm/mm

From code (e.g. a stage of ``bench.gpu_engine``): ``run("cuda", "qwen3-0.6b", workdir=...)``
returns the JSON-able result without provenance; the CLI adds provenance and writes it to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.provenance import provenance
from bench.serving.metrics import percentile
from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.llm_engine import LLMEngine
from engine.loading.model_config import ModelConfig

__all__ = ["WORKLOADS", "Workload", "run"]

MODEL_NAMES = ("a", "b", "c")
_KV_ALIGN = 256
"""engine.worker.kv_cache rounds a block up to this many bytes (checked against the built engine)."""


@dataclass(frozen=True)
class Workload:
    num_models: int
    burst: int
    """Requests in each model's burst, all arriving in one round."""
    prompt_len: tuple[int, int]
    """Prompt lengths, uniform in [lo, hi]."""
    max_tokens: tuple[int, int]
    """Output lengths (EOS ignored), uniform in [lo, hi]."""
    phase_steps: int
    """Model i's burst arrives at round i * phase_steps."""
    background: int
    """Requests per phase for each model not bursting, spread evenly over the phase's first half."""
    pool_factor: float
    """Pool blocks = pool_factor x the largest burst's peak KV blocks (every request at full length)."""
    max_num_seqs: int
    """Per static engine; the shared engine gets num_models times this."""
    max_num_batched_tokens: int
    """Per static engine; the shared engine gets num_models times this."""
    block_size: int = 16
    temperature: float = 0.0
    seed: int = 0


WORKLOADS: dict[str, Workload] = {
    # The original CPU workload: 8 requests on a at step 0, 8 on b at step 60, a pool of exactly
    # one burst (48 blocks), 24 per model in the static split.
    "demo": Workload(
        num_models=2,
        burst=8,
        prompt_len=(32, 32),
        max_tokens=(64, 64),
        phase_steps=60,
        background=0,
        pool_factor=1.0,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
    ),
    # The H200 workload scaled down for a CPU smoke test of the same code path.
    "tiny": Workload(
        num_models=3,
        burst=12,
        prompt_len=(24, 48),
        max_tokens=(16, 32),
        phase_steps=32,
        background=2,
        pool_factor=1.5,
        max_num_seqs=16,
        max_num_batched_tokens=256,
    ),
    # About 4,700 blocks (8 GiB) per burst at peak; pool 1.5x; static share 0.5x with 3 models.
    # A burst lasts about as long as its longest output under the shared pool, so the load moves
    # from one model to the next; the idle models get nothing (``background`` adds a trickle).
    "qwen3-0.6b": Workload(
        num_models=3,
        burst=128,
        prompt_len=(256, 512),
        max_tokens=(128, 256),
        phase_steps=256,
        background=0,
        pool_factor=1.5,
        max_num_seqs=128,
        max_num_batched_tokens=4096,
    ),
}


@dataclass(frozen=True)
class Request:
    rid: str
    model: str
    arrival: int
    """Round in which it is added."""
    prompt: list[int]
    max_tokens: int
    burst: bool


def make_requests(wl: Workload, models: list[str], vocab_size: int) -> list[Request]:
    """The arrivals, sorted by round: each model's burst in its phase, background on the others."""
    lengths = random.Random(wl.seed)  # its own stream: the same lengths whatever the vocabulary
    ids = random.Random(wl.seed + 1)

    def request(rid: str, model: str, arrival: int, burst: bool) -> Request:
        n, max_tokens = lengths.randint(*wl.prompt_len), lengths.randint(*wl.max_tokens)
        prompt = [ids.randrange(3, vocab_size - 1) for _ in range(n)]
        return Request(rid, model, arrival, prompt, max_tokens, burst)

    out: list[Request] = []
    for phase, model in enumerate(models):
        start = phase * wl.phase_steps
        out.extend(request(f"{model}-burst-{i}", model, start, True) for i in range(wl.burst))
        for other in models:
            if other == model:
                continue
            for j in range(wl.background):
                arrival = start + j * wl.phase_steps // (2 * wl.background)
                out.append(request(f"{other}-bg{phase}-{j}", other, arrival, False))
    out.sort(key=lambda r: r.arrival)
    return out


def _blocks(r: Request, block_size: int, *, with_output: bool = True) -> int:
    return -(-(len(r.prompt) + (r.max_tokens if with_output else 0)) // block_size)


def kv_plan(wl: Workload, requests: list[Request], kv_bytes_per_token: int) -> dict[str, Any]:
    """Pool and share sizes from the workload's KV need, and that need, for the report."""
    bs = wl.block_size
    block_bytes = -(-kv_bytes_per_token * bs // _KV_ALIGN) * _KV_ALIGN
    models = sorted({r.model for r in requests})
    bursts = {m: [r for r in requests if r.burst and r.model == m] for m in models}
    peak = max(sum(_blocks(r, bs) for r in rs) for rs in bursts.values())
    admit = max(sum(_blocks(r, bs, with_output=False) for r in rs) for rs in bursts.values())
    background = [r for r in requests if not r.burst]
    pool = math.ceil(wl.pool_factor * peak)
    share = pool // len(models)
    longest = max(_blocks(r, bs) for r in requests)
    if share < longest:
        raise ValueError(f"a static share of {share} blocks cannot hold the longest request ({longest})")
    gib = block_bytes / (1 << 30)
    return {
        "kv_bytes_per_token": kv_bytes_per_token,
        "block_bytes": block_bytes,
        "burst_peak_blocks": peak,
        "burst_peak_gib": round(peak * gib, 2),
        "burst_prompt_blocks": admit,
        "background_blocks_per_phase": sum(_blocks(r, bs) for r in background) // len(models),
        "pool_blocks": pool,
        "pool_gib": round(pool * gib, 2),
        "static_share_blocks": share,
        "static_share_over_burst_peak": round(share / peak, 3),
        "shared_pool_over_burst_peak": round(pool / peak, 3),
    }


def _describe(plan: dict[str, Any], wl: Workload) -> str:
    k = wl.num_models
    return (
        f"KV: {plan['kv_bytes_per_token']} B/token, block of {wl.block_size} tokens = "
        f"{plan['block_bytes'] / (1 << 20):.2f} MiB. One burst ({wl.burst} requests, prompts "
        f"{wl.prompt_len[0]}-{wl.prompt_len[1]}, outputs {wl.max_tokens[0]}-{wl.max_tokens[1]}) needs "
        f"{plan['burst_peak_blocks']} blocks ({plan['burst_peak_gib']} GiB) at peak, "
        f"{plan['burst_prompt_blocks']} for its prompts alone. Pool {plan['pool_blocks']} blocks "
        f"({plan['pool_gib']} GiB) = {plan['shared_pool_over_burst_peak']}x a burst; static split "
        f"{k} x {plan['static_share_blocks']} blocks = {plan['static_share_over_burst_peak']}x a burst "
        f"per model, so the bursting model "
        + (
            "must queue or preempt there, while the shared pool holds the whole burst."
            if plan["static_share_over_burst_peak"] < 1
            else "fits in its share too (no contention expected)."
        )
    )


def _write_models(shape: str, k: int, workdir: Path, device: str, dtype: str) -> dict[str, Path]:
    names = MODEL_NAMES[:k]
    if shape == "demo":
        from engine.loading.demo import DEMO_MODELS, write_demo_model

        demo = list(DEMO_MODELS)
        if k > len(demo):
            raise ValueError(f"shape demo has {len(demo)} models, not {k}")
        return {n: write_demo_model(d, workdir / f"demo-{d}") for n, d in zip(names, demo, strict=False)}
    from bench.engine.random_model import build_random_qwen3

    paths = {}
    for i, name in enumerate(names):
        path = workdir / f"multimodel-{shape}-{dtype}-seed{i}"
        if not ((path / "config.json").exists() and list(path.glob("*.safetensors"))):
            build_random_qwen3(path, shape=shape, dtype=dtype, device=device, seed=i)
        paths[name] = path
    return paths


def _build_engine(
    paths: dict[str, Path], plan: dict[str, Any], num_blocks: int, wl: Workload, device: str, dtype: str
) -> LLMEngine:
    k = len(paths)
    max_len = -(-(wl.prompt_len[1] + wl.max_tokens[1]) // wl.block_size) * wl.block_size + wl.block_size
    specs = tuple(
        ModelSpec(name=n, path=str(p), dtype=dtype, max_model_len=max_len) for n, p in paths.items()
    )
    engine = LLMEngine(
        EngineConfig(
            models=specs,
            device=device,
            block_size=wl.block_size,
            kv_cache_bytes=num_blocks * plan["block_bytes"],
            max_num_seqs=k * wl.max_num_seqs,
            max_num_batched_tokens=k * wl.max_num_batched_tokens,
        )
    )
    if (engine.kv_cache.block_bytes, engine.block_pool.num_blocks) != (plan["block_bytes"], num_blocks):
        raise AssertionError(
            f"pool is {engine.block_pool.num_blocks} blocks of {engine.kv_cache.block_bytes} B, "
            f"planned {num_blocks} of {plan['block_bytes']}"
        )
    return engine


def _engine_info(engines: list[LLMEngine]) -> dict[str, Any]:
    e = engines[0]
    return {
        "engines": len(engines),
        "pool_blocks_per_engine": e.block_pool.num_blocks,
        "max_num_seqs_per_engine": e.config.seq_limit,
        "max_num_batched_tokens_per_engine": e.config.token_budget,
        "cuda_graphs": all(r.graphs is not None for x in engines for r in x.runners.values()),
        "async_scheduling": all(x.async_scheduling for x in engines),
    }


def _warm_up(engine: LLMEngine, wl: Workload, vocab_size: int) -> None:
    """Compile the prefill and mixed-step kernels before timing (decode graphs are captured at
    start-up): the workload's prompt lengths and short ones (Triton specializes integer
    arguments equal to 1 or divisible by 16), staggered ends, a second wave joining decodes."""
    for runner in engine.runners.values():
        if runner.graphs is not None:
            runner.graphs.capture_all()  # a no-op where the engine captured them at start-up
    rng = random.Random(10_000 + wl.seed)
    lo, hi = wl.prompt_len
    lengths = [lo, hi, (lo + hi) // 2, lo + 1, hi - 1, 2, 16, 17, 32, 33]
    params = [SamplingParams(temperature=wl.temperature, max_tokens=m, ignore_eos=True) for m in (3, 6, 9)]
    for wave in range(2):
        for model in engine.models:
            for i, n in enumerate(lengths):
                prompt = [rng.randrange(3, vocab_size - 1) for _ in range(n)]
                engine.add_request(f"warm-{wave}-{model}-{i}", model, prompt, params[i % len(params)])
        for _ in range(2):
            engine.step()
    while engine.has_work:
        engine.step()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _device_wait(engine: LLMEngine) -> float:
    return float(getattr(engine, "device_wait_s", 0.0))


def _stats(values: list[float], digits: int = 4) -> dict[str, float]:
    s = sorted(values)
    return {"mean": round(sum(s) / len(s), digits), "p99": round(percentile(s, 99), digits)}


def _drive(
    engines: dict[str, LLMEngine], requests: list[Request], wl: Workload, device: str
) -> dict[str, Any]:
    """Feed the arrivals round by round; every engine with work steps once per round."""
    unique = list({id(e): e for e in engines.values()}.values())
    params: dict[int, SamplingParams] = {}
    seqs: dict[str, list[Any]] = {}
    arrival_t: dict[str, float] = {}
    first_t: dict[str, float] = {}
    done: dict[str, tuple[int, float, str]] = {}
    tokens: dict[str, int] = {}
    preempted0 = sum(e.scheduler.num_preemptions for e in unique)
    steps0 = sum(e.num_steps for e in unique)
    wait0 = sum(_device_wait(e) for e in unique)
    total_blocks = sum(e.block_pool.num_blocks for e in unique)
    used_sum = used_max = 0.0
    rounds_busy = 0
    step = nxt = 0
    _sync(device)
    start = time.perf_counter()
    while True:
        if not any(e.has_work for e in unique):
            if nxt == len(requests):
                break
            step = max(step, requests[nxt].arrival)  # nothing runs until the next arrival
        now = time.perf_counter()
        while nxt < len(requests) and requests[nxt].arrival <= step:
            r = requests[nxt]
            p = params.get(r.max_tokens) or params.setdefault(
                r.max_tokens,
                SamplingParams(temperature=wl.temperature, max_tokens=r.max_tokens, ignore_eos=True),
            )
            seqs[r.rid] = engines[r.model].add_request(r.rid, r.model, r.prompt, p)
            arrival_t[r.rid] = now
            tokens[r.rid] = 0
            nxt += 1
        for e in unique:
            if not e.has_work:
                continue
            deltas = e.step()
            t = time.perf_counter()
            for rid, d in deltas:
                if d.token_ids and rid not in first_t:
                    first_t[rid] = t
                tokens[rid] += len(d.token_ids)
                if d.finish_reason is not None:
                    done[rid] = (step, t, d.finish_reason)
        used = 1 - sum(e.block_pool.num_free_blocks for e in unique) / total_blocks
        used_sum += used
        used_max = max(used_max, used)
        rounds_busy += 1
        step += 1
    _sync(device)
    elapsed = time.perf_counter() - start

    by_rid = {r.rid: r for r in requests}
    wrong = {
        rid: (tokens[rid], by_rid[rid].max_tokens, done.get(rid, (0, 0.0, None))[2])
        for rid in by_rid
        if tokens.get(rid) != by_rid[rid].max_tokens or done.get(rid, (0, 0.0, ""))[2] != "length"
    }
    if wrong:
        raise AssertionError(f"requests without exactly max_tokens tokens: {dict(list(wrong.items())[:5])}")
    total = sum(tokens.values())
    per_model: dict[str, Any] = {}
    for model in engines:
        rs = [r for r in requests if r.model == model]
        lat_steps = [done[r.rid][0] - r.arrival + 1 for r in rs]
        lat_s = [done[r.rid][1] - arrival_t[r.rid] for r in rs]
        entry: dict[str, Any] = {
            "requests": len(rs),
            "output_tokens": sum(tokens[r.rid] for r in rs),
            "preemptions": sum(s.num_preemptions for r in rs for s in seqs[r.rid]),
            "latency_steps": _stats([float(x) for x in lat_steps], 1),
            "latency_s": _stats(lat_s),
            "ttft_s": _stats([first_t[r.rid] - arrival_t[r.rid] for r in rs]),
            "burst_latency_s": _stats([x for r, x in zip(rs, lat_s, strict=True) if r.burst]),
        }
        if any(not r.burst for r in rs):
            entry["background_latency_s"] = _stats([x for r, x in zip(rs, lat_s, strict=True) if not r.burst])
        per_model[model] = entry
    return {
        "output_tokens": total,
        "seconds": round(elapsed, 3),
        "output_tok_per_s": round(total / elapsed, 1),
        "steps": step,
        "engine_steps": sum(e.num_steps for e in unique) - steps0,
        "preemptions": sum(e.scheduler.num_preemptions for e in unique) - preempted0,
        # Host time spent waiting for sampled tokens (GPU ahead of the host); the rest is host work.
        "host_wait_s": round(sum(_device_wait(e) for e in unique) - wait0, 3),
        "pool_used_mean": round(used_sum / max(1, rounds_busy), 3),
        "pool_used_max": round(used_max, 3),
        "per_model": per_model,
    }


def _ratios(shared: dict[str, Any], static: dict[str, Any]) -> dict[str, Any]:
    """shared / static for each figure (below 1 is better for times, above 1 for tok/s)."""

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    out: dict[str, Any] = {
        k: ratio(shared[k], static[k])
        for k in ("seconds", "output_tok_per_s", "steps", "engine_steps", "preemptions")
    }
    for model, s in shared["per_model"].items():
        t = static["per_model"][model]
        out[model] = {
            f"{key}_{stat}": ratio(s[key][stat], t[key][stat])
            for key in ("latency_steps", "latency_s", "ttft_s", "burst_latency_s", "background_latency_s")
            if key in s
            for stat in ("mean", "p99")
        }
    return out


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def run(
    device: str = "cpu",
    shape: str = "demo",
    *,
    num_models: int | None = None,
    workload: Workload | None = None,
    workdir: str | Path | None = None,
    dtype: str | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Shared pool vs static split on ``device``; a JSON-able result (no provenance).

    shape: demo (CPU only, 2 models), tiny or qwen3-0.6b (random Qwen3 checkpoints, written to
    ``workdir`` and reused from there; a temporary directory when None). The workload defaults
    to ``WORKLOADS[shape]``; ``num_models`` overrides its model count. dtype defaults to
    bfloat16 on CUDA, float32 elsewhere.
    """
    say = log or (lambda s: print(s, flush=True))
    wl = workload or WORKLOADS[shape]
    if num_models is not None:
        wl = dataclasses.replace(wl, num_models=num_models)
    if not 2 <= wl.num_models <= len(MODEL_NAMES):
        raise ValueError(f"num_models must be 2 or 3, not {wl.num_models}")
    dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        paths = _write_models(shape, wl.num_models, root, device, dtype)
        _free(device)
        timings["build_s"] = round(time.perf_counter() - t0, 2)
        config = ModelConfig.from_hf(json.loads((paths["a"] / "config.json").read_text()), str(paths["a"]))
        itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        kv_per_token = config.num_layers * 2 * config.num_kv_heads * config.head_dim * itemsize
        requests = make_requests(wl, list(paths), config.vocab_size)
        plan = kv_plan(wl, requests, kv_per_token)
        say(_describe(plan, wl))

        t0 = time.perf_counter()
        shared = _build_engine(paths, plan, plan["pool_blocks"], wl, device, dtype)
        timings["shared_load_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        _warm_up(shared, wl, config.vocab_size)
        timings["shared_warmup_s"] = round(time.perf_counter() - t0, 2)
        shared_info = _engine_info([shared])
        shared_result = _drive(dict.fromkeys(paths, shared), requests, wl, device)
        say(f"shared: {_line(shared_result)}")
        del shared
        _free(device)

        t0 = time.perf_counter()
        split = {
            n: _build_engine({n: p}, plan, plan["static_share_blocks"], wl, device, dtype)
            for n, p in paths.items()
        }
        timings["static_load_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        for e in split.values():
            _warm_up(e, wl, config.vocab_size)
        timings["static_warmup_s"] = round(time.perf_counter() - t0, 2)
        static_info = _engine_info(list(split.values()))
        static_result = _drive(split, requests, wl, device)
        say(f"static: {_line(static_result)}")
        del split
        _free(device)

    if shared_result["output_tokens"] != static_result["output_tokens"]:
        raise AssertionError(
            f"token totals differ: {shared_result['output_tokens']} vs {static_result['output_tokens']}"
        )
    if sum(r.max_tokens for r in requests) != shared_result["output_tokens"]:
        raise AssertionError("token total differs from the workload's")
    for key in ("cuda_graphs", "async_scheduling"):
        if shared_info[key] != static_info[key]:
            raise AssertionError(
                f"{key} differs between the systems: {shared_info[key]} vs {static_info[key]}"
            )
    ratios = _ratios(shared_result, static_result)
    say(
        f"shared/static: time {ratios['seconds']}, tok/s {ratios['output_tok_per_s']}, "
        f"steps {ratios['steps']}; burst latency mean "
        + ", ".join(f"{m} {ratios[m]['burst_latency_s_mean']}" for m in paths)
    )
    return {
        "workload": {
            **dataclasses.asdict(wl),
            "shape": shape,
            "dtype": dtype,
            "device": device,
            "models": list(paths),
            "num_requests": len(requests),
            "num_prompt_tokens": sum(len(r.prompt) for r in requests),
            "num_output_tokens": sum(r.max_tokens for r in requests),
            "torch_threads": torch.get_num_threads(),
        },
        "kv_plan": plan,
        "engine": {"shared_pool": shared_info, "static_split": static_info},
        "shared_pool": shared_result,
        "static_split": static_result,
        "shared_over_static": ratios,
        "speedup": ratios["output_tok_per_s"],
        "timings": timings,
    }


def _line(r: dict[str, Any]) -> str:
    lat = " ".join(
        f"{m}:{x['latency_s']['mean']:.3f}/{x['latency_s']['p99']:.3f}s" for m, x in r["per_model"].items()
    )
    return (
        f"{r['seconds']:.2f} s, {r['output_tok_per_s']:.0f} tok/s, {r['steps']} steps "
        f"({r['engine_steps']} engine steps), {r['preemptions']} preemptions, pool used "
        f"{r['pool_used_mean']:.2f} mean; latency mean/p99 {lat}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", default="demo", choices=sorted(WORKLOADS))
    parser.add_argument("--num-models", type=int, default=None)
    parser.add_argument(
        "--background", type=int, default=None, help="trickle requests per idle model per phase"
    )
    parser.add_argument("--workdir", default=None, help="checkpoints (reused); default a temporary one")
    parser.add_argument("--out", default=None, help="default bench/results/engine_multimodel_<...>.json")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    workload = WORKLOADS[args.shape]
    if args.background is not None:
        workload = dataclasses.replace(workload, background=args.background)
    result = run(args.device, args.shape, num_models=args.num_models, workload=workload, workdir=args.workdir)
    result.update(provenance(sys.argv, args.device))
    default = (
        "engine_multimodel_cpu.json"
        if (args.device, args.shape, args.num_models, args.background) == ("cpu", "demo", None, None)
        else f"engine_multimodel_{args.shape}_{result['workload']['num_models']}models_{args.device.replace(':', '')}.json"
    )
    out = Path(args.out or Path("bench/results") / default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
