"""Where the host's time goes in the throughput workload's busiest steps (cProfile).

With asynchronous scheduling the GPU runs step N+1 while the host turns step N into deltas and
schedules N+2; once the host's share of a step outgrows the GPU's, the GPU waits. This runs
nano-vllm's workload (``bench.workload``) on a random Qwen3-0.6B and profiles ``LLMEngine.step``
over a window of steps at full batch, printing the functions by own and by cumulative time.

    python -m bench.host_profile --model-dir /dev/shm/qwen3-0.6b [--steps 60] [--device cuda]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from pathlib import Path

import click


@click.command()
@click.option("--model-dir", type=click.Path(path_type=Path), required=True)
@click.option("--device", default="cuda", show_default=True)
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--skip", default=20, show_default=True, help="steps run before profiling")
@click.option("--steps", default=60, show_default=True, help="steps profiled")
@click.option("--scale", default=1.0, show_default=True)
def main(model_dir: Path, device: str, dtype: str, skip: int, steps: int, scale: float) -> None:
    from bench.workload import nano_vllm_workload
    from engine import LLM, SamplingParams

    workload = nano_vllm_workload().scaled(scale)
    llm = LLM(
        str(model_dir), dtype=dtype, device=device, kv_cache_bytes=(48 if device != "cpu" else 1) << 30,
        max_num_seqs=256,
        max_num_batched_tokens=16384,
    )  # fmt: skip
    engine, name = llm.engine, llm.model_names[0]
    for i, (prompt, m) in enumerate(zip(workload.prompt_token_ids, workload.max_tokens, strict=True)):
        params = SamplingParams(temperature=workload.temperature, ignore_eos=True, max_tokens=m)
        engine.add_request(f"r{i}", name, prompt, params)
    for _ in range(skip):
        engine.step()
    profiler = cProfile.Profile()
    waited = engine.device_wait_s
    start = time.perf_counter()
    profiler.enable()
    for _ in range(steps):
        engine.step()
    profiler.disable()
    wall = time.perf_counter() - start
    waited = engine.device_wait_s - waited
    print(
        f"{steps} steps at {engine.scheduler.num_running} running: {wall / steps * 1e3:.2f} ms/step "
        f"under the profiler, of which waiting for the GPU {waited / steps * 1e3:.2f} ms"
    )
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(28)
        print(out.getvalue())


if __name__ == "__main__":
    main()
