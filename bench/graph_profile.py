"""One decode bucket's CUDA graph, replayed alone: the GPU's time per step without the host.

``bench.gpu_engine`` times whole engine steps; this isolates what the GPU does in one. It builds
a random model of a real shape, runs a request to a given context, then replays the captured
graph of one batch bucket back to back and reports, for each variant (``VARIANTS``: PDL off, the
older GEMM tiles, no K/V prefetch, ...):

- ``replay_us``: GPU time per replay (CUDA events over many replays): the step's device floor;
- the kernels of one replay (torch.profiler): name, launches, mean µs. With PDL on a kernel's
  span includes its early start (waiting for the one before), so the sum exceeds the replay;
  with PDL off the spans are the kernels' own, and replay minus their sum is launch gaps.

    python -m bench.graph_profile --out $OUT [--shape qwen3-0.6b] [--bucket 1] [--context 256]
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

_PDL, _GEMM, _ATTN = "engine.kernels.pdl", "engine.kernels.skinny_gemm", "engine.kernels.paged_attention"
_SPLITS, _MERGE = "engine.attention.triton_paged", "engine.kernels.split_merge"
_STEP = "engine.kernels.step_advance"
VARIANTS: dict[str, dict[tuple[str, str], object]] = {
    "default": {},
    "pdl_off": {(_PDL, "ENABLED"): False},
    "cublas_gemms": {("engine.layers.linear", "USE_SKINNY_GEMM"): False},
    "greedy_tail_off": {("engine.worker.cuda_graph_runner", "LOOP_MAX_BUCKET"): 0},
    "lm_head_b64": {("engine.layers.embedding", "LM_HEAD_BLOCK_N"): 64},
    "lm_head_b32": {("engine.layers.embedding", "LM_HEAD_BLOCK_N"): 32},
    "lm_head_w8": {("engine.layers.embedding", "LM_HEAD_WARPS"): 8},
    "lm_head_w2": {("engine.layers.embedding", "LM_HEAD_WARPS"): 2},
    "step_block_512": {(_STEP, "BLOCK"): 512},
    "step_block_2048": {(_STEP, "BLOCK"): 2048},
    "step_block_4096": {(_STEP, "BLOCK"): 4096},
    "step_warps8": {(_STEP, "NUM_WARPS"): 8},
    "gemv_block16_head32": {
        ("engine.kernels.normed_gemv", "BLOCK_N"): 16,
        ("engine.layers.embedding", "LM_HEAD_BLOCK_N"): 32,
    },
    "gemv_block64_head32": {
        ("engine.kernels.normed_gemv", "BLOCK_N"): 64,
        ("engine.layers.embedding", "LM_HEAD_BLOCK_N"): 32,
    },
    "first_layer_kernels": {("engine.layers.embedding", "GATHER_IN_FIRST_GEMV"): False},
    "gemm_tiles": {(_GEMM, "PREFETCH_WHOLE_SLICE"): False},
    "no_kv_prefetch": {(_ATTN, "PREFETCH_SMALL_BATCH"): False},
    "norm_kernel": {("engine.layers.norm", "DEFER_TO_GEMV"): False},
    "merge_kernel": {(_MERGE, "FUSE_INTO_GEMM"): False},
    "merge_in_gemm_b16": {(_MERGE, "MERGE_BLOCK_N"): 16},
    "merge_in_gemm_b64": {(_MERGE, "MERGE_BLOCK_N"): 64},
    "merge_in_gemm_b64_split8": {(_MERGE, "MERGE_BLOCK_N"): 64, (_MERGE, "MERGE_SPLIT_K"): 8},
    "merge_in_gemm_b128_split8": {(_MERGE, "MERGE_BLOCK_N"): 128, (_MERGE, "MERGE_SPLIT_K"): 8},
    "skinny_split2": {(_GEMM, "ONE_ROW_SPLIT_K"): 2},
    "skinny_split8": {(_GEMM, "ONE_ROW_SPLIT_K"): 8},
    "final_norm_kernel": {("engine.layers.embedding", "FUSE_FINAL_NORM"): False},
    "rope_kernel": {("engine.layers.attention", "FUSED_DECODE_MAX_SEQS"): 0},
    "gemv_block16": {("engine.kernels.normed_gemv", "BLOCK_N"): 16},
    "gemv_block64": {("engine.kernels.normed_gemv", "BLOCK_N"): 64},
    "skinny_block32": {(_GEMM, "ONE_ROW_BLOCK_N"): 32},
    "gemv_warps4": {("engine.kernels.normed_gemv", "NUM_WARPS"): 4},
    "skinny_warps4": {(_GEMM, "ONE_ROW_WARPS"): 4},
    "merge_warps1": {(_MERGE, "MERGE_WARPS"): 1},
    "attn_warps2": {(_ATTN, "SMALL_BATCH_WARPS"): 2},
    "attn_warps1": {(_ATTN, "SMALL_BATCH_WARPS"): 1},
    "splits4": {(_SPLITS, "SMALL_BATCH_MAX_SPLITS"): 4},
    "splits4_merge_kernel": {(_SPLITS, "SMALL_BATCH_MAX_SPLITS"): 4, (_MERGE, "FUSE_INTO_GEMM"): False},
    "splits2_t64": {(_SPLITS, "SMALL_BATCH_MAX_SPLITS"): 2, (_ATTN, "SMALL_BATCH_TILE_N"): 64},
    "splits1_t64": {(_SPLITS, "SMALL_BATCH_MAX_SPLITS"): 1, (_ATTN, "SMALL_BATCH_TILE_N"): 64},
    "splits1_t128_w8": {
        (_SPLITS, "SMALL_BATCH_MAX_SPLITS"): 1,
        (_ATTN, "SMALL_BATCH_TILE_N"): 128,
        (_ATTN, "SMALL_BATCH_WARPS"): 8,
    },
}
"""Module flags flipped for one capture each (the kernels they select are compiled then)."""


def set_flags(variant: str) -> dict[tuple[str, str], object]:
    """Set ``VARIANTS[variant]``'s module flags; returns the values they replaced."""
    flags = VARIANTS[variant]
    saved = {(m, a): getattr(importlib.import_module(m), a) for m, a in flags}
    for (m, a), value in flags.items():
        setattr(importlib.import_module(m), a, value)
    return saved


def restore_flags(saved: dict[tuple[str, str], object]) -> None:
    for (m, a), value in saved.items():
        setattr(importlib.import_module(m), a, value)


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--shape", default="qwen3-0.6b", show_default=True)
@click.option("--bucket", "buckets", type=int, multiple=True, default=(1,), show_default=True)
@click.option("--context", default=256, show_default=True, help="tokens per sequence when replayed")
@click.option("--replays", default=200, show_default=True)
@click.option("--variant", "variants", type=click.Choice(list(VARIANTS)), multiple=True,
              default=("default", "pdl_off"), show_default=True)  # fmt: skip
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/dev/shm/strongroom-bench"))
@click.option("--step-loop/--no-step-loop", default=False, show_default=True,
              help="also time the replay with the engine's per-step work outside the graph, op by op")  # fmt: skip
def main(
    out_dir: Path,
    shape: str,
    buckets: tuple[int, ...],
    context: int,
    replays: int,
    variants: tuple[str, ...],
    workdir: Path,
    step_loop: bool,
) -> None:
    from bench.gpu_engine import _hf_model, _save
    from bench.provenance import provenance
    from engine import LLM, SamplingParams

    path = workdir / shape
    if not (path / "config.json").exists():
        _save(_hf_model(shape), path)
    llm = LLM(str(path), dtype="bfloat16", device="cuda", max_num_seqs=max(buckets), kv_cache_bytes=8 << 30)
    engine, name = llm.engine, llm.model_names[0]
    report: dict[str, Any] = {"provenance": provenance(["bench.graph_profile"], "cuda"), "runs": []}
    for bucket in buckets:
        params = SamplingParams(temperature=0, max_tokens=10**6, ignore_eos=True)
        for i in range(bucket):
            engine.add_request(
                f"b{bucket}-{i}", name, [2 + (i * 7 + j) % 9000 for j in range(context)], params
            )
        graphs = engine.runners[name].graphs
        staged: list[tuple[Any, ...]] = []
        stage = graphs.stage
        graphs.stage = lambda *a, seen=staged, real=stage: seen.append(a) or real(*a)  # type: ignore[method-assign]
        for _ in range(4):  # prefill, then decode steps: the static inputs hold real sequences
            engine.step()
        del graphs.stage
        replaced = []  # a graph freed while its pool is captured into trips the caching allocator
        for variant in variants:
            saved = set_flags(variant)
            try:
                replaced.append(graphs.graphs.pop(bucket))
                graphs._capture(bucket)
                timed = _time(_replayer(graphs, bucket, staged[-1]), replays)
            finally:
                restore_flags(saved)
            run = {"bucket": bucket, "context": context, "variant": variant, **timed}
            report["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "kernels"}), flush=True)
            for k in run["kernels"][:14]:
                print(f"  {k['us']:8.2f} us x{k['per_replay']:>4}  {k['name']}")
        if step_loop:  # the graph without the greedy tail, as the engine ran it before
            saved = set_flags("greedy_tail_off")
            try:
                replaced.append(graphs.graphs.pop(bucket))
                graphs._capture(bucket)
            finally:
                restore_flags(saved)
            graphs.stage(*staged[-1])
            loops = _step_loop(graphs, bucket, staged[-1], replays)
            report["runs"].append({"bucket": bucket, "context": context, "step_loop": loops})
            print(json.dumps({"bucket": bucket, "step_loop": loops}), flush=True)
        for i in range(bucket):
            engine.abort(f"b{bucket}-{i}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "graph_profile.json").write_text(json.dumps(report, indent=2, default=str))


def _step_loop(graphs: Any, bucket: int, args: tuple[Any, ...], steps: int) -> dict[str, float]:
    """µs per step of the replay with each piece of the engine's per-step work outside the graph
    added in turn (wall clock, the host waiting for step i-1's token before queueing step i+1,
    as the engine does)."""
    import torch

    from engine.worker.device_transfer import scatter_rows

    logits = graphs.graphs[bucket][0].logits[:bucket]
    rows = list(range(bucket))
    graph = graphs.graphs[bucket][0].graph

    def one(stage: bool, scatter: bool, argmax: bool, d2h: bool, prev: Any) -> Any:
        if stage:
            graphs.stage(*args)
        if scatter and prev is not None:
            scatter_rows(graphs.token_ids, rows, prev[0], rows)
        graph.replay()
        tokens = logits.argmax(dim=-1) if argmax else graphs.token_ids[:bucket]
        if not d2h:
            return (tokens, None)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return (tokens, ready)

    combos = {
        "replay": (False, False, False, False),
        "replay+argmax": (False, False, True, False),
        "replay+argmax+d2h": (False, False, True, True),
        "stage+replay+argmax+d2h": (True, False, True, True),
        "engine_ops": (True, True, True, True),
    }
    out = {}
    for label, flags in combos.items():
        best = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            start = time.perf_counter()
            prev = None
            older = None
            for _ in range(steps):
                cur = one(*flags, prev)
                if older is not None and older[1] is not None:
                    older[1].synchronize()  # the engine reads step i-1's token after queueing step i
                older, prev = prev, cur
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) * 1e6 / steps)
        out[label] = best
    return out


def _replayer(graphs: Any, bucket: int, args: tuple[Any, ...]) -> Callable[[], None]:
    """One replay of the bucket. A greedy bucket's graphs move their inputs a token on each
    replay, so its pair alternates as in the engine and the inputs are staged again every 16
    replays (one input copy per 16 replays is in the time), keeping the context near its start."""
    captured = graphs.graphs[bucket]
    if len(captured) == 1:
        replay: Callable[[], None] = captured[0].graph.replay
        return replay
    count = 0

    def alternate() -> None:
        nonlocal count
        if count % 16 == 0:
            graphs.stage(*args)
        captured[count % 2].graph.replay()
        count += 1

    return alternate


def _time(replay: Callable[[], None], replays: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.cuda_timing import event_times_us

    times = event_times_us(replay, replays)
    profiled = 20
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(profiled):
            replay()
        torch.cuda.synchronize()
    time.sleep(0.1)
    kernels = [
        e for e in prof.key_averages() if e.device_type.name == "CUDA" and e.self_device_time_total > 0
    ]
    total = sum(e.self_device_time_total for e in kernels) / profiled
    return {
        "replay_us": min(times),
        "replay_us_all": times,
        "kernel_us_sum": total,
        "launches": sum(e.count for e in kernels) // profiled,
        "kernels": sorted(
            (
                {
                    "name": e.key[:100],
                    "per_replay": e.count // profiled,
                    "us": e.self_device_time_total / e.count,
                    "us_per_replay": e.self_device_time_total / profiled,
                }
                for e in kernels
            ),
            key=lambda k: -k["us_per_replay"],
        ),
    }


if __name__ == "__main__":
    main()
