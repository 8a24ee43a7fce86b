"""One decode bucket's CUDA graph, replayed alone: the GPU's time per step without the host.

``bench.gpu_engine`` times whole engine steps; this isolates what the GPU does in one. It builds
a random model of a real shape, runs a request to a given context, then, for each variant
(``VARIANTS``: a ``CudaTuning`` with PDL off, the older GEMM tiles, no K/V prefetch, ...),
captures one batch bucket's graph with that tuning, replays it back to back and reports:

- ``replay_us``: GPU time per replay (CUDA events over many replays): the step's device floor;
- the kernels of one replay (torch.profiler): name, launches, mean µs. With PDL on a kernel's
  span includes its early start (waiting for the one before), so the sum exceeds the replay;
  with PDL off the spans are the kernels' own, and replay minus their sum is launch gaps.

    python -m bench.engine.graph_profile --out $OUT [--shape qwen3-0.6b] [--bucket 1] [--context 256] \
        [--quantization fp8] [--kv-cache-dtype fp8]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from engine.tuning import CudaTuning

_DEFAULT = CudaTuning()
VARIANTS: dict[str, CudaTuning] = {
    "default": _DEFAULT,
    "pdl_off": replace(_DEFAULT, pdl=False),
    "cublas_gemms": replace(_DEFAULT, skinny_gemm=False),
    "greedy_tail_off": replace(_DEFAULT, greedy_tail_max_bucket=0),
    "lm_head_b64": replace(_DEFAULT, lm_head_block_n=64),
    "lm_head_b32": replace(_DEFAULT, lm_head_block_n=32),
    "lm_head_w8": replace(_DEFAULT, lm_head_warps=8),
    "lm_head_w2": replace(_DEFAULT, lm_head_warps=2),
    "step_block_512": replace(_DEFAULT, step_block=512),
    "step_block_2048": replace(_DEFAULT, step_block=2048),
    "step_block_4096": replace(_DEFAULT, step_block=4096),
    "step_warps8": replace(_DEFAULT, step_warps=8),
    "gemv_block16_head32": replace(_DEFAULT, gemv_block_n=16, lm_head_block_n=32),
    "gemv_block64_head32": replace(_DEFAULT, gemv_block_n=64, lm_head_block_n=32),
    "first_layer_kernels": replace(_DEFAULT, gather_in_first_gemv=False),
    "gemm_tiles": replace(_DEFAULT, prefetch_whole_slice=False),
    "no_kv_prefetch": replace(_DEFAULT, prefetch_small_batch=False),
    "norm_kernel": replace(_DEFAULT, norm_in_gemv=False),
    "merge_kernel": replace(_DEFAULT, merge_in_gemm=False),
    "merge_in_gemm_b16": replace(_DEFAULT, merge_block_n=16),
    "merge_in_gemm_b64": replace(_DEFAULT, merge_block_n=64),
    "merge_in_gemm_b64_split8": replace(_DEFAULT, merge_block_n=64, merge_split_k=8),
    "merge_in_gemm_b128_split8": replace(_DEFAULT, merge_block_n=128, merge_split_k=8),
    "skinny_split2": replace(_DEFAULT, one_row_split_k=2),
    "skinny_split8": replace(_DEFAULT, one_row_split_k=8),
    "final_norm_kernel": replace(_DEFAULT, final_norm_in_lm_head=False),
    "rope_kernel": replace(_DEFAULT, rope_in_attention_max_seqs=0),
    "fp8_kv_cast": replace(_DEFAULT, fp8_kv_widen_asm=False),
    "gemv_block16": replace(_DEFAULT, gemv_block_n=16),
    "gemv_block64": replace(_DEFAULT, gemv_block_n=64),
    "long_rows": replace(_DEFAULT, norm_in_gemv_max_k=8192),  # wider norms in the GEMM, chunked
    "long_rows_b16": replace(_DEFAULT, norm_in_gemv_max_k=8192, long_row_block_n=16),
    "long_rows_b64": replace(_DEFAULT, norm_in_gemv_max_k=8192, long_row_block_n=64),
    "long_rows_chunk256": replace(_DEFAULT, norm_in_gemv_max_k=8192, long_row_chunk=256),
    "long_rows_chunk1024": replace(_DEFAULT, norm_in_gemv_max_k=8192, long_row_chunk=1024),
    "long_rows_w4": replace(_DEFAULT, norm_in_gemv_max_k=8192, long_row_warps=4),
    "skinny_block32": replace(_DEFAULT, one_row_block_n=32),
    "gemv_warps4": replace(_DEFAULT, gemv_warps=4),
    "skinny_warps4": replace(_DEFAULT, one_row_warps=4),
    "merge_warps1": replace(_DEFAULT, merge_warps=1),
    "attn_warps2": replace(_DEFAULT, small_batch_warps=2),
    "attn_warps1": replace(_DEFAULT, small_batch_warps=1),
    "splits4": replace(_DEFAULT, small_batch_max_splits=4),
    "splits4_merge_kernel": replace(_DEFAULT, small_batch_max_splits=4, merge_in_gemm=False),
    "splits2_t64": replace(_DEFAULT, small_batch_max_splits=2, small_batch_tile_n=64),
    "splits1_t64": replace(_DEFAULT, small_batch_max_splits=1, small_batch_tile_n=64),
    "splits1_t128_w8": replace(
        _DEFAULT, small_batch_max_splits=1, small_batch_tile_n=128, small_batch_warps=8
    ),
}
"""Each variant is the production ``CudaTuning`` with a few fields replaced; each gets graphs of its
own, captured (and its kernels compiled) with it."""


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
@click.option(
    "--quantization", type=click.Choice(["fp8", "int8"]), default=None, help="weights quantized at load"
)
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "fp8"]), default="auto", show_default=True)
@click.option("--kv-cache-gb", type=float, default=8.0, show_default=True)
def main(
    out_dir: Path,
    shape: str,
    buckets: tuple[int, ...],
    context: int,
    replays: int,
    variants: tuple[str, ...],
    workdir: Path,
    step_loop: bool,
    quantization: str | None,
    kv_cache_dtype: str,
    kv_cache_gb: float,
) -> None:
    from bench.gpu_engine import _hf_model, _save
    from bench.provenance import provenance
    from engine import LLM, SamplingParams

    path = workdir / shape
    if not (path / "config.json").exists():
        _save(_hf_model(shape), path)
    llm = LLM(
        str(path),
        dtype="bfloat16",
        device="cuda",
        max_num_seqs=max(buckets),
        kv_cache_bytes=int(kv_cache_gb * (1 << 30)),
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
    )
    engine, name = llm.engine, llm.model_names[0]
    report: dict[str, Any] = {
        "provenance": provenance(["bench.engine.graph_profile"], "cuda"),
        "quantization": quantization,
        "kv_cache_dtype": kv_cache_dtype,
        "runs": [],
    }
    budget = engine.config.token_budget
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
        # prefill (in chunks of the step's token budget), then decode steps: the static inputs
        # hold real sequences, every one of them decoding
        for _ in range(4 + -(-bucket * context // budget)):
            engine.step()
        del graphs.stage
        kept = []  # each variant's graphs, alive until the end (their pools stay captured)
        for variant in variants:
            tuned = _capture(engine.runners[name], bucket, VARIANTS[variant])
            kept.append(tuned)
            timed = _time(_replayer(tuned, bucket, staged[-1]), replays)
            run = {"bucket": bucket, "context": context, "variant": variant, **timed}
            report["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "kernels"}), flush=True)
            for k in run["kernels"][:14]:
                print(
                    f"  {k['us_per_replay']:8.2f} us/replay {k['us']:8.2f} us x{k['per_replay']:>4}  {k['name']}"
                )
        if step_loop:  # the graph without the greedy tail, as the engine ran it before
            tuned = _capture(engine.runners[name], bucket, VARIANTS["greedy_tail_off"])
            kept.append(tuned)
            tuned.stage(*staged[-1])
            loops = _step_loop(tuned, bucket, staged[-1], replays)
            report["runs"].append({"bucket": bucket, "context": context, "step_loop": loops})
            print(json.dumps({"bucket": bucket, "step_loop": loops}), flush=True)
        for i in range(bucket):
            engine.abort(f"b{bucket}-{i}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "graph_profile.json").write_text(json.dumps(report, indent=2, default=str))


def _capture(runner: Any, bucket: int, tuning: CudaTuning) -> Any:
    """A graph runner of its own for ``tuning`` over the runner's model, its bucket captured."""
    from engine.fused_step import FusedStep
    from engine.worker.cuda_graph_runner import CudaGraphRunner

    engine_graphs = runner.graphs
    graphs = CudaGraphRunner(
        FusedStep(runner.hosted.model, tuning),
        max_num_seqs=engine_graphs.buckets[-1],
        max_blocks=engine_graphs.max_blocks,
        block_size=engine_graphs.block_size,
        device=engine_graphs.device,
        tuning=tuning,
    )
    graphs._capture(bucket)  # on padding inputs: no sequence's cache is written
    return graphs


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
    """One replay of the bucket, on the inputs of ``args`` (staged here). A greedy bucket's graphs
    move their inputs a token on each replay, so its pair alternates as in the engine and the
    inputs are staged again every 16 replays (one input copy per 16 replays is in the time),
    keeping the context near its start."""
    captured = graphs.graphs[bucket]
    graphs.stage(*args)
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

    from bench.engine.cuda_timing import event_times_us

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
