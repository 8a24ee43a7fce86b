"""A lone sequence's prefill replayed from a captured graph gives the eager path's tokens exactly
(run through the device tool: ``pytest -m gpu``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM

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
        out += [o.token_ids for o in llm.generate(prompts[:3], params)]  # several: eager either way
        return out, runner.prefill_graphs.num_replays if runner.prefill_graphs is not None else 0

    with_graphs, replays = run(True)
    eager, _ = run(False)
    assert replays == len(LENGTHS) + 2  # every prompt alone (2 tokens or more), the base, the extend
    assert with_graphs == eager
