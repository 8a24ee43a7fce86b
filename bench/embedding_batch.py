"""Embedding requests in the engine: batched against one by one, and what they cost running streams.

Part 1: ``--inputs`` inputs of ``--input-len`` tokens embedded in batches of up to
``--budget`` tokens against one input per forward (a budget of one input). Part 2: ``--streams`` greedy
streams decode; after a few steps one embedding request of all the inputs arrives. The streams'
inter-token latency (host time between steps) with and without it: one embedding batch runs
before each step, so a step waits for at most one batch. Demo models (CPU by default).

    python -m bench.embedding_batch
    python -m bench.embedding_batch --device cuda --inputs 1024
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.llm_engine import LLMEngine
from engine.loading.demo import write_demo_model

WARM_STEPS = 4


def _engine(root: Path, device: str, budget: int) -> LLMEngine:
    specs = (
        ModelSpec(name="demo-chat", path=str(write_demo_model("demo-chat", root / "demo-chat"))),
        ModelSpec(
            name="demo-embed", path=str(write_demo_model("demo-embed", root / "demo-embed")), kind="embedding"
        ),
    )
    return LLMEngine(
        EngineConfig(models=specs, device=device, kv_cache_bytes=64 << 20, max_num_batched_tokens=budget)
    )


def _embed_s(e: LLMEngine, inputs: list[list[int]], tag: str) -> float:
    start = time.perf_counter()
    e.add_embedding(tag, "demo-embed", inputs)
    while e.has_work:
        e.step()
    e.take_embeddings()
    return time.perf_counter() - start


def _itl_ms(e: LLMEngine, streams: int, steps: int, inputs: list[list[int]] | None, tag: str) -> list[float]:
    greedy = SamplingParams(temperature=0, max_tokens=steps + WARM_STEPS, ignore_eos=True)
    for s in range(streams):
        e.add_request(f"{tag}-s{s}", "demo-chat", [1, 2, 3, 4 + s], greedy)
    gaps: list[float] = []
    last = time.perf_counter()
    for step in range(steps + WARM_STEPS):
        if inputs is not None and step == WARM_STEPS:
            e.add_embedding(f"{tag}-emb", "demo-embed", inputs)
        e.step()
        now = time.perf_counter()
        if step >= WARM_STEPS:
            gaps.append((now - last) * 1e3)
        last = now
    while e.has_work:
        e.step()
    e.take_embeddings()
    return gaps


@click.command()
@click.option("--device", default="cpu")
@click.option("--inputs", "num_inputs", default=256)
@click.option("--input-len", default=32)
@click.option("--budget", default=2048, help="max_num_batched_tokens")
@click.option("--streams", default=8)
@click.option("--steps", default=64)
def main(device: str, num_inputs: int, input_len: int, budget: int, streams: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        e = _engine(Path(tmp) / "batched", device, budget)
        one = _engine(Path(tmp) / "one", device, input_len)
        inputs = [[(7 * i + j) % 400 + 1 for j in range(input_len)] for i in range(num_inputs)]
        _embed_s(e, inputs[:8], "warm")
        _embed_s(one, inputs[:8], "warm")
        tokens = num_inputs * input_len
        batched, single = _embed_s(e, inputs, "batched"), _embed_s(one, inputs, "one")
        print(f"embed {num_inputs} x {input_len} tokens, budget {budget}, {device}:")
        print(f"  batched:          {batched * 1e3:8.1f} ms  {tokens / batched:10.0f} tok/s")
        print(f"  one per forward:  {single * 1e3:8.1f} ms  {tokens / single:10.0f} tok/s")
        for label, extra in (("streams alone", None), ("with embeddings", inputs)):
            gaps = _itl_ms(e, streams, steps, extra, label.replace(" ", "-"))
            print(
                f"  {label:16s} ITL ms: p50 {statistics.median(gaps):6.2f}  max {max(gaps):6.2f}"
                f"  ({streams} streams, {steps} steps)"
            )


if __name__ == "__main__":
    main()
