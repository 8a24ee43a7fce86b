"""Offline throughput on nano-vllm's workload: our engine and HF transformers, in the same run.

    python -m bench.engine.throughput --shape tiny --device cpu --dtype float32 --scale 0.02
    python -m bench.engine.throughput --shape qwen3-0.6b --device cuda --dtype bfloat16     # the H200 run

Every system gets the same prompts (token ids) and per-request max_tokens, samples at
temperature 0.6 with no top-k/top-p and ignores EOS, so each request produces exactly max_tokens
tokens. The timed region is ``generate`` only (model load and a warm-up pass of the same workload
are excluded).
HF ``generate`` has one max_new_tokens per call, so it runs the workload in fixed-size batches with
left padding and generates up to each batch's largest max_tokens; only the requested tokens count.
The continuous batching manager (``init_continuous_batching``) takes per-request max_new_tokens.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from bench.engine.random_model import SHAPES, build_random_qwen3
from bench.engine.workload import Workload, nano_vllm_workload
from bench.provenance import provenance
from strongroom.progress_bar import ProgressBar

SYSTEMS = ("ours", "hf-generate", "hf-continuous")
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True, slots=True)
class RunResult:
    system: str
    elapsed_s: float
    num_requests: int
    num_prompt_tokens: int
    num_output_tokens: int
    output_tok_s: float
    total_tok_s: float
    note: str = ""


def _result(system: str, workload: Workload, elapsed: float, num_output: int, note: str = "") -> RunResult:
    return RunResult(
        system=system,
        elapsed_s=round(elapsed, 4),
        num_requests=workload.num_requests,
        num_prompt_tokens=workload.num_prompt_tokens,
        num_output_tokens=num_output,
        output_tok_s=round(num_output / elapsed, 2),
        total_tok_s=round((num_output + workload.num_prompt_tokens) / elapsed, 2),
        note=note,
    )


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_ours(model_dir: Path, workload: Workload, *, dtype: str, device: str) -> RunResult:
    from engine import LLM

    with LLM(str(model_dir), dtype=dtype, device=device) as llm:
        return time_workload(llm, workload, device)


def time_workload(llm: Any, workload: Workload, device: str, system: str = "ours") -> RunResult:
    """The workload through an ``engine.LLM``'s engine, after a short warm-up."""
    from engine import SamplingParams

    engine = llm.engine
    model = next(iter(engine.models))

    def params(max_tokens: int) -> SamplingParams:
        # Text decoded once per sequence at its end, as LLM.generate (and nano-vllm's) does.
        return SamplingParams(
            temperature=workload.temperature, ignore_eos=True, max_tokens=max_tokens, output_text="final"
        )

    def generate(prompts: list[list[int]], max_tokens: list[int]) -> int:
        # LLM.generate takes one SamplingParams for all prompts; the workload has one per request,
        # so it feeds LLM's engine directly (the same add_request/step loop LLM.generate runs).
        for i, (prompt, m) in enumerate(zip(prompts, max_tokens, strict=True)):
            engine.add_request(f"bench-{id(prompts)}-{i}", model, prompt, params(m))
        num_output = 0
        while engine.has_work:
            for _, delta in engine.step():
                num_output += len(delta.token_ids)
        return num_output

    warm = workload.warm_up()
    generate(warm.prompt_token_ids, warm.max_tokens)
    _synchronize(device)
    start = time.perf_counter()
    num_output = generate(workload.prompt_token_ids, workload.max_tokens)
    _synchronize(device)
    elapsed = time.perf_counter() - start
    return _result(system, workload, elapsed, num_output)


def _load_hf(model_dir: Path, *, dtype: str, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model = model.to(device)
    model.eval()
    return model


def _hf_generation_config(model: Any, workload: Workload, max_new_tokens: int) -> Any:
    from transformers import GenerationConfig

    # An id one past the vocabulary is never sampled: the HF side of ignore_eos.
    never = int(model.config.vocab_size)
    return GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=True,
        temperature=workload.temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=never,
        pad_token_id=0,
    )


def run_hf_generate(
    model_dir: Path, workload: Workload, *, dtype: str, device: str, batch_size: int
) -> RunResult:
    import torch

    model = _load_hf(model_dir, dtype=dtype, device=device)

    def generate(prompts: list[list[int]], max_new_tokens: int) -> None:
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        config = _hf_generation_config(model, workload, max_new_tokens)
        with torch.inference_mode():
            model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)

    generate([workload.prompt_token_ids[0][:16]], 4)
    _synchronize(device)
    start = time.perf_counter()
    for first in range(0, workload.num_requests, batch_size):
        batch = slice(first, first + batch_size)
        generate(workload.prompt_token_ids[batch], max(workload.max_tokens[batch]))
    _synchronize(device)
    elapsed = time.perf_counter() - start
    note = f"batches of {batch_size}, left padded, each to its longest max_tokens"
    return _result("hf-generate", workload, elapsed, workload.num_output_tokens, note)


def run_hf_continuous(model_dir: Path, workload: Workload, *, dtype: str, device: str) -> RunResult:
    import torch

    model = _load_hf(model_dir, dtype=dtype, device=device)
    config = _hf_generation_config(model, workload, max(workload.max_tokens))
    manager = model.init_continuous_batching(generation_config=config)
    manager.warmup()
    manager.start()
    try:
        with torch.inference_mode():
            _synchronize(device)
            start = time.perf_counter()
            request_ids = {
                manager.add_request(input_ids=prompt, max_new_tokens=max_tokens)
                for prompt, max_tokens in zip(workload.prompt_token_ids, workload.max_tokens, strict=True)
            }
            num_output = 0
            while request_ids:
                result = manager.get_result(timeout=600)
                if result is None:
                    raise RuntimeError("HF continuous batching stopped before every request finished")
                if result.is_finished() and result.request_id in request_ids:
                    request_ids.discard(result.request_id)
                    num_output += len(result.generated_tokens)
            _synchronize(device)
            elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True, timeout=60)
    return _result("hf-continuous", workload, elapsed, num_output, "init_continuous_batching, default config")


RUNNERS: dict[str, Callable[..., RunResult]] = {
    "ours": run_ours,
    "hf-generate": run_hf_generate,
    "hf-continuous": run_hf_continuous,
}


def run_benchmark(
    *,
    model_dir: Path,
    workload: Workload,
    systems: tuple[str, ...],
    dtype: str,
    device: str,
    hf_batch_size: int,
    on_error: Callable[[str, BaseException], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[RunResult]:
    """Run each system in turn; ``progress`` is told (systems run, systems in all) after each."""
    results = []
    for done, system in enumerate(systems, 1):
        kwargs: dict[str, Any] = {"dtype": dtype, "device": device}
        if system == "hf-generate":
            kwargs["batch_size"] = hf_batch_size
        try:
            results.append(RUNNERS[system](model_dir, workload, **kwargs))
        except Exception as exc:
            if on_error is None:
                raise
            on_error(system, exc)
        if progress is not None:
            progress(done, len(systems))
    return results


def ratios(results: list[RunResult]) -> dict[str, float]:
    """Our output tok/s over each peer's."""
    ours = next((r for r in results if r.system == "ours"), None)
    if ours is None:
        return {}
    return {
        f"ours/{r.system}": round(ours.output_tok_s / r.output_tok_s, 3)
        for r in results
        if r.system != "ours"
    }


@click.command("throughput")
@click.option("--model", "model_path", type=click.Path(path_type=Path), help="HF checkpoint directory.")
@click.option(
    "--shape",
    type=click.Choice(sorted(SHAPES)),
    default="tiny",
    show_default=True,
    help="Random-weight Qwen3 shape to build when --model is not given.",
)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--scale", type=float, default=1.0, show_default=True, help="Shrink the workload (CPU runs).")
@click.option("--systems", default=",".join(SYSTEMS), show_default=True)
@click.option("--hf-batch-size", type=int, default=32, show_default=True)
@click.option(
    "--output", type=click.Path(path_type=Path), default=None, help="JSON path (default bench/results/)."
)
def throughput(
    model_path: Path | None,
    shape: str,
    device: str,
    dtype: str,
    scale: float,
    systems: str,
    hf_batch_size: int,
    output: Path | None,
) -> None:
    """nano-vllm's throughput workload through our engine and HF transformers; prints tok/s and ratios."""
    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    unknown = [s for s in chosen if s not in RUNNERS]
    if unknown:
        raise click.BadParameter(
            f"unknown systems {unknown}; choose from {list(SYSTEMS)}", param_hint="--systems"
        )
    import torch

    torch.set_grad_enabled(False)
    workload = nano_vllm_workload().scaled(scale)
    errors: dict[str, str] = {}

    def on_error(system: str, exc: BaseException) -> None:
        tail = "".join(traceback.format_exception(exc)[-6:])
        errors[system] = f"{type(exc).__name__}: {exc}\n{tail}"
        click.echo(f"{system}: FAILED {errors[system]}", err=True)
        if device.startswith("cuda"):
            # A device fault poisons the CUDA context: later systems in this process would fail too.
            click.echo(
                "a CUDA error leaves the context unusable; run the remaining systems separately", err=True
            )

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_path or build_random_qwen3(
            Path(tmp) / shape, shape=shape, dtype=dtype, device=device
        )
        with ProgressBar(f"running {len(chosen)} system(s)") as bar:
            results = run_benchmark(
                model_dir=model_dir,
                workload=workload,
                systems=chosen,
                dtype=dtype,
                device=device,
                hf_batch_size=hf_batch_size,
                on_error=on_error,
                progress=bar,
            )
    click.echo(
        f"workload: {workload.num_requests} requests, {workload.num_prompt_tokens} prompt and "
        f"{workload.num_output_tokens} output tokens (scale {scale})"
    )
    for r in results:
        click.echo(
            f"{r.system:>14}: {r.output_tok_s:10.1f} output tok/s  {r.total_tok_s:10.1f} total tok/s  "
            f"{r.elapsed_s:8.2f} s"
        )
    for name, value in ratios(results).items():
        click.echo(f"{name}: {value:.2f}x")
    report = {
        "benchmark": "throughput",
        "workload": {
            "name": "nano-vllm",
            "scale": scale,
            "num_requests": workload.num_requests,
            "num_prompt_tokens": workload.num_prompt_tokens,
            "num_output_tokens": workload.num_output_tokens,
            "temperature": workload.temperature,
        },
        "model": str(model_path) if model_path else f"random {shape}",
        "dtype": dtype,
        "device": device,
        "results": [asdict(r) for r in results],
        "ratios": ratios(results),
        "errors": errors,
        **provenance(sys.argv, device),
    }
    path = (
        output
        or RESULTS_DIR
        / f"throughput_{shape}_{device.split(':')[0]}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(f"wrote {path}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    throughput()
