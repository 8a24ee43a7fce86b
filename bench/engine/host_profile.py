"""Where the host's time goes in the throughput workload's busiest steps (cProfile).

With asynchronous scheduling the GPU runs step N+1 while the host turns step N into deltas and
schedules N+2; once the host's share of a step outgrows the GPU's, the GPU waits. This runs
nano-vllm's workload (``bench.engine.workload``) on a random Qwen3 and profiles ``LLMEngine.step`` over a
window of steps at full batch, printing the step time and the functions by own and cumulative time.

    python -m bench.engine.host_profile --model-dir /dev/shm/qwen3-0.6b [--steps 60]        # on the GPU
    python -m bench.engine.host_profile --host-only [--output-text delta]                   # on any CPU

``--host-only`` measures the host's share alone, on a machine without a GPU: the engine runs its
asynchronous path with a tiny random model whose decode steps go through the model runner's
CUDA-graph path with replays that do nothing, and whose sampler draws random ids, so everything
else (scheduling, KV bookkeeping, staging, detokenizing, stop checks, deltas) is the real code. Compare ratios between
revisions on one machine; absolute times depend on the CPU.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click


@click.command()
@click.option("--model-dir", type=click.Path(path_type=Path), default=None)
@click.option("--device", default="cuda", show_default=True)
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--host-only", is_flag=True, help="CPU: model and sampling replaced (see above)")
@click.option("--output-text", type=click.Choice(["final", "delta"]), default="final", show_default=True)
@click.option("--skip", default=20, show_default=True, help="steps run before profiling")
@click.option("--steps", default=60, show_default=True, help="steps timed, then profiled")
@click.option("--scale", default=1.0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="also write the timing as JSON")
def main(
    model_dir: Path | None,
    device: str,
    dtype: str,
    host_only: bool,
    output_text: str,
    skip: int,
    steps: int,
    scale: float,
    out: Path | None,
) -> None:
    from bench.engine.workload import nano_vllm_workload
    from engine import LLM, SamplingParams

    if host_only:
        device, dtype = "cpu", "float32"
        model_dir = model_dir or _tiny_model()
    if model_dir is None:
        raise click.UsageError("--model-dir is needed unless --host-only")
    workload = nano_vllm_workload().scaled(scale)
    llm = LLM(
        str(model_dir), dtype=dtype, device=device, kv_cache_bytes=(48 if device != "cpu" else 1) << 30,
        max_num_seqs=256,
        max_num_batched_tokens=16384,
    )  # fmt: skip
    engine, name = llm.engine, llm.model_names[0]
    if host_only:
        _replace_device_work(engine, name)
    for i, (prompt, m) in enumerate(zip(workload.prompt_token_ids, workload.max_tokens, strict=True)):
        params = SamplingParams(
            temperature=workload.temperature, ignore_eos=True, max_tokens=m, output_text=output_text
        )
        engine.add_request(f"r{i}", name, prompt, params)
    for _ in range(skip):
        engine.step()
    running = engine.scheduler.num_running
    waited = engine.device_wait_s
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall = time.perf_counter() - start
    waited = engine.device_wait_s - waited
    print(
        f"{steps} steps at {running} running ({output_text} text): {wall / steps * 1e3:.2f} ms/step, "
        f"of which waiting for the GPU {waited / steps * 1e3:.2f} ms"
    )
    if out is not None:
        from bench.provenance import provenance

        record = {
            "provenance": provenance(sys.argv, device),
            "host_only": host_only,
            "output_text": output_text,
            "num_running": running,
            "steps": steps,
            "ms_per_step": wall / steps * 1e3,
            "device_wait_ms_per_step": waited / steps * 1e3,
        }
        out.write_text(json.dumps(record, indent=2) + "\n")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        engine.step()
    profiler.disable()
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(28)
        print(text.getvalue())


def _tiny_model() -> Path:
    from bench.engine.random_model import build_random_qwen3

    path = Path(tempfile.gettempdir()) / "strongroom-host-profile-tiny"
    if not (path / "config.json").exists():
        build_random_qwen3(path, shape="tiny", dtype="float32")
    return path


def _replace_device_work(engine: Any, name: str) -> None:
    """The engine's asynchronous CUDA path on the CPU: the model runner's real graph path (inputs
    staged, pending tokens scattered) with replays that do nothing, and random sampled ids."""
    import torch

    from engine.sampling.sampler import SamplerOutput
    from engine.worker.cuda_graph_runner import Captured, CudaGraphRunner

    runner = engine.runners[name]
    graphs = CudaGraphRunner(
        runner.hosted.model,
        max_num_seqs=engine.config.seq_limit,
        max_blocks=-(-runner.hosted.max_model_len // engine.config.block_size),
        block_size=engine.config.block_size,
        device=torch.device("cpu"),
    )
    for bucket in graphs.buckets:  # "captured" already, so run() stages and replays nothing
        graphs.graphs[bucket] = [Captured(_NoReplay(), torch.zeros(bucket, 1))]  # type: ignore[arg-type]
    runner.graphs = graphs
    vocab = runner.hosted.config.vocab_size

    def sample(logits: torch.Tensor, rows: list[Any], argmax: torch.Tensor | None = None) -> SamplerOutput:
        n = logits.shape[0]
        return SamplerOutput(token_ids=torch.randint(0, min(vocab, 10_000), (n,)), logprobs=[None] * n)

    engine.sampler = sample
    engine.async_scheduling = True  # the GPU path: look-ahead scheduling, placeholders


class _NoReplay:
    def replay(self) -> None:
        pass


if __name__ == "__main__":
    main()
