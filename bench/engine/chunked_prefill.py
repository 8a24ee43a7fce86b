"""Inter-token latency of running streams when a long prompt arrives, chunked prefill against none.

Streams decode; after a few steps one long prompt arrives. Unchunked, the step that prefills it
holds every stream's next token for the whole prompt's arithmetic; chunked, each step carries at
most a chunk of it beside the decodes. Per configuration: the streams' inter-token latency (ITL,
host time between one stream's consecutive tokens) before the arrival and from the arrival to
the long prompt's first token, that prompt's time to first token, and how many steps it took.
Configurations run interleaved, ``--rounds`` times each; medians over rounds.

    python -m bench.engine.chunked_prefill --out bench/results                 # CPU, ``small`` shape
    python -m bench.engine.chunked_prefill --out $OUT --device cuda --shape qwen3-0.6b --prompt-len 8192
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import click

from bench.provenance import provenance

CONFIGS: dict[str, dict[str, int | None]] = {
    "whole": {"max_num_batched_tokens": 1 << 16, "long_prefill_token_threshold": None},
    "budget_2048": {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": None},
    "default_2048_1024": {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": 1024},
    "2048_512": {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": 512},
    "2048_256": {"max_num_batched_tokens": 2048, "long_prefill_token_threshold": 256},
}
"""Name -> engine options; "whole" prefills the long prompt in one step (the baseline)."""

WARM_STEPS = 8
"""Steps the streams decode before the long prompt arrives."""


def _one_round(engine: Any, streams: list[list[int]], long_prompt: list[int]) -> dict[str, Any]:
    from engine import SamplingParams

    rid = f"{time.monotonic_ns()}"
    decode = SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True)
    for k, prompt in enumerate(streams):
        engine.add_request(f"{rid}-s{k}", "m", prompt, decode)
    stream_ids = {f"{rid}-s{k}" for k in range(len(streams))}
    last: dict[str, float] = {}
    before: list[float] = []
    during: list[float] = []
    arrival = first = 0.0
    step = arrival_step = missed = 0
    long_id = f"{rid}-long"
    while not first:
        if step == WARM_STEPS:
            engine.add_request(long_id, "m", long_prompt, SamplingParams(temperature=0, max_tokens=1))
            arrival, arrival_step = time.perf_counter(), step
        deltas = engine.step()
        now = time.perf_counter()
        step += 1
        if arrival:
            missed += len(stream_ids - {r for r, d in deltas if d.token_ids})
        for r, delta in deltas:
            if r == long_id and delta.token_ids:
                first = now
            elif r in stream_ids and delta.token_ids:
                if r in last and step > 2:  # the first steps compile and warm caches
                    (during if arrival else before).append(now - last[r])
                last[r] = now
    for r in stream_ids:
        engine.abort(r)
    while engine.has_work:
        engine.step()
    return {
        "itl_before_p50_ms": statistics.median(before) * 1e3,
        "itl_during_p50_ms": statistics.median(during) * 1e3,
        "itl_during_max_ms": max(during) * 1e3,
        "itl_during_mean_ms": statistics.fmean(during) * 1e3,
        "long_ttft_ms": (first - arrival) * 1e3,
        "long_ttft_steps": step - arrival_step,
        "stream_steps_without_token": missed,
    }


def _summary(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Medians over rounds (sums for the steps a stream went without a token); the ratios to "whole" are taken within each round first (the load
    of a shared machine drifts between rounds more than between configurations of one round)."""
    whole = results["whole"]
    summary = {}
    for name, rounds in results.items():
        summary[name] = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        summary[name]["stream_steps_without_token"] = sum(r["stream_steps_without_token"] for r in rounds)
        for key in ("itl_during_max_ms", "itl_during_p50_ms", "long_ttft_ms"):
            ratios = [r[key] / w[key] for r, w in zip(rounds, whole, strict=True)]
            summary[name][key.removesuffix("_ms") + "_vs_whole"] = statistics.median(ratios)
    return summary


def _kv_cache_bytes(path: Path, dtype: str, tokens: int) -> int:
    config = json.loads((path / "config.json").read_text())
    per_token = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * config["head_dim"]
    return per_token * (2 if dtype == "bfloat16" else 4) * tokens


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--shape", type=click.Choice(["small", "tiny", "qwen3-0.6b"]), default="small", show_default=True
)
@click.option("--streams", "num_streams", type=int, default=8, show_default=True)
@click.option("--prompt-len", type=int, default=4096, show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads on CPU")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/tmp/strongroom-chunked-prefill"))
def main(
    out_dir: Path,
    device: str,
    shape: str,
    num_streams: int,
    prompt_len: int,
    rounds: int,
    threads: int,
    workdir: Path,
) -> None:
    from bench.engine.random_model import build_random_qwen3
    from engine.config import EngineConfig, ModelSpec
    from engine.llm_engine import LLMEngine

    dtype = "bfloat16" if device == "cuda" else "float32"
    path = build_random_qwen3(workdir / shape, shape=shape, dtype=dtype, device=device)
    rng = random.Random(0)
    engines = {
        name: LLMEngine(
            EngineConfig(
                models=(ModelSpec(name="m", path=str(path), dtype=dtype),),
                device=device,
                num_threads=threads if device == "cpu" else None,
                # The long prompt and each stream's prompt plus the tokens it decodes meanwhile.
                kv_cache_bytes=_kv_cache_bytes(path, dtype, prompt_len + num_streams * 1024),
                max_num_seqs=num_streams + 1,
                enable_prefix_caching=False,  # every round's prompts are fresh anyway
                **options,  # type: ignore[arg-type]
            )
        )
        for name, options in CONFIGS.items()
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for _ in range(rounds):
        streams = [[rng.randint(2, 10000) for _ in range(16)] for _ in range(num_streams)]
        long_prompt = [rng.randint(2, 10000) for _ in range(prompt_len)]
        for name, engine in engines.items():
            results[name].append(_one_round(engine, streams, long_prompt))
    summary = _summary(results)
    report = {
        "shape": shape,
        "device": device,
        "streams": num_streams,
        "prompt_len": prompt_len,
        "rounds": rounds,
        "configs": CONFIGS,
        "summary": summary,
        "rounds_raw": results,
        "provenance": provenance(sys.argv, device),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"chunked_prefill_{device}.json"
    (out_dir / name).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
