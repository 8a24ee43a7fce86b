"""Pipeline parallel on CPU (gloo, float32): two stages, and two stages of two tensor-parallel
ranks each, give the tokens and logits of one rank.

Each layout is one engine hosting every architecture at once (multi-model PP), shared by the
module's tests: its ranks cost a process start and an import of torch each. The last test of a
layout stops its ranks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from engine.errors import EngineConfigError
from engine.llm_engine import LLMEngine
from engine.models import LlamaForCausalLM

from .parallel_generation import Result, assert_same_greedy, assert_same_seeded, config, generate

LAYOUTS = {"pp2": (1, 2), "tp2xpp2": (2, 2)}
"""(tensor_parallel_size, pipeline_parallel_size)"""


@pytest.fixture(scope="module", params=list(LAYOUTS))
def staged_engine(
    request: pytest.FixtureRequest, model_dirs: dict[str, Path], single_rank: Result
) -> Iterator[LLMEngine]:
    # After the single-rank reference: no whole-model engine can start beside a parallel one.
    engine = LLMEngine(config(model_dirs, *LAYOUTS[request.param]))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def staged(staged_engine: LLMEngine) -> Result:
    return generate(staged_engine)


def test_greedy_tokens_and_logits_match_one_rank(single_rank: Result, staged: Result) -> None:
    assert_same_greedy(single_rank, staged)


def test_seeded_sampling_matches_one_rank(single_rank: Result, staged: Result) -> None:
    assert_same_seeded(single_rank, staged)


def test_prefix_cache_hits_as_on_one_rank(single_rank: Result, staged: Result) -> None:
    assert staged[2] == single_rank[2] > 0


def test_each_stage_keeps_the_kv_of_its_own_layers(staged_engine: LLMEngine, staged: Result) -> None:
    ranks = staged_engine.ranks
    assert ranks is not None
    tp, pp = ranks.place.tp_size, ranks.place.pp_size
    for hosted in staged_engine.models.values():
        c, model = hosted.config, cast(LlamaForCausalLM, hosted.model)
        assert hosted.num_stage_layers == c.num_layers // pp
        assert hosted.kv_bytes_per_token * tp * pp == c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4
        assert len(model.model.layers) == c.num_layers  # the others' places are kept, weightless
        assert model.model.norm is None and not hasattr(model, "lm_head")  # rank 0: the first stage
        assert sum(p.numel() for p in model.model.layers[c.num_layers // pp :].parameters()) == 0


def test_layers_not_splitting_evenly_are_refused(model_dirs: dict[str, Path]) -> None:
    with pytest.raises(
        EngineConfigError, match="pipeline_parallel_size 3 does not split its 2 decoder layers evenly"
    ):
        LLMEngine(config(model_dirs, 1, 3))


@pytest.mark.timeout(60)
def test_close_stops_the_other_ranks(staged_engine: LLMEngine, staged: Result) -> None:
    """Last for each layout: it takes the shared engine down (a killed rank:
    test_pipeline_parallel_failure)."""
    ranks = staged_engine.ranks
    assert ranks is not None
    pids = ranks.pids
    assert len(pids) == ranks.place.world_size - 1
    staged_engine.close()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert staged_engine.ranks is None
