"""A lone sequence's prefill replayed from a captured graph, and a step of decodes and prefill
chunks split into the decode graph and prefill replays, give the eager path's tokens exactly (run
through the device tool: ``pytest -m gpu``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

# Across the bucket edges (16, 32, ... 256 for these 256-position models): one token (eager),
# exactly a bucket, one over, and near the largest.
LENGTHS = (1, 15, 16, 17, 33, 120, 240)


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3"])
def test_prefill_graphs_change_no_token(model_dirs: dict[str, Path], arch: str) -> None:
    # Distinct first tokens: no prompt finds another's blocks in the prefix cache.
    prompts = [[2 + k, *range(10, 10 + n)] for k, n in enumerate(LENGTHS)]
    # A prefix-cache hit: base's first 112 tokens (7 blocks) are cached, 28 new ones extend them.
    base = [0, *range(10, 130)]
    extend = [*base, *range(200, 220)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    def run(graphs: bool) -> tuple[list[list[int]], int]:
        llm = LLM(str(model_dirs[arch]), device="cuda", kv_cache_bytes=1 << 24, block_size=16)
        runner = llm.engine.runners[llm.model_names[0]]
        assert runner.prefill_graphs is not None and runner.prefill_graphs.buckets[-1] == 256
        if not graphs:
            runner.prefill_graphs = None
        out = [llm.generate([p], params)[0].token_ids for p in prompts]
        out += [llm.generate([p], params)[0].token_ids for p in (base, extend)]
        alone = runner.prefill_graphs.num_replays if runner.prefill_graphs is not None else 0
        # Several at once: the third finds its first block cached and recomputes one token (a
        # decode-graph row), so with graphs the first two are prefill replays beside it (a split
        # step, test below); without, eager.
        out += [o.token_ids for o in llm.generate(prompts[:3], params)]
        return out, alone

    with_graphs, replays = run(True)
    eager, _ = run(False)
    assert replays == len(LENGTHS) + 2  # every prompt alone (2 tokens or more), the base, the extend
    assert with_graphs == eager


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_steps_of_decodes_and_prefill_chunks_split_into_graphs_change_no_token(
    model_dirs: dict[str, Path], arch: str
) -> None:
    # A small step budget and chunk cap: the long prompts are prefilled in 24-token chunks over
    # several steps while the short ones decode, so most steps hold decodes and chunks (the last
    # chunk of each samples, the others do not).
    short = [[3 + k, *range(20, 28 + k)] for k in range(4)]
    long = [[40 + k, *range(50, 150 + 20 * k)] for k in range(3)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    seeded = SamplingParams(temperature=0.8, seed=7, max_tokens=12, ignore_eos=True)

    def run(split: bool) -> tuple[list[list[int]], int]:
        tuning = replace(DEFAULT_TUNING, split_mixed_max_prefills=2 if split else 0)
        llm = LLM(str(model_dirs[arch]), device="cuda", kv_cache_bytes=1 << 24, block_size=16,
                  max_num_batched_tokens=64, long_prefill_token_threshold=24, tuning=tuning)  # fmt: skip
        runner = llm.engine.runners[llm.model_names[0]]
        assert runner.prefill_graphs is not None
        out = [o.token_ids for o in llm.generate(short + long, params)]
        out += [o.token_ids for o in llm.generate(long + short, seeded)]
        return out, runner.prefill_graphs.num_replays

    split, replays = run(True)
    eager, eager_replays = run(False)
    # Off, only a long prompt left alone replays; split, most of its chunks beside decodes do too.
    assert replays >= eager_replays + 6
    assert split == eager
