"""Tensor parallel on CPU (gloo, float32): two ranks give the tokens and logits of one.

One engine hosts every architecture at once (multi-model TP) and serves all the asserts: each
spawned rank costs a process start and an import of torch. The last test stops them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.errors import EngineConfigError
from engine.llm_engine import LLMEngine

from .parallel_generation import Result, assert_same_greedy, assert_same_seeded, config, generate


@pytest.fixture(scope="module")
def single(single_rank: Result) -> Result:
    return single_rank


@pytest.fixture(scope="module")
def sharded_engine(model_dirs: dict[str, Path], single: Result):  # type: ignore[no-untyped-def]
    engine = LLMEngine(config(model_dirs, 2))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def sharded(sharded_engine: LLMEngine) -> Result:
    return generate(sharded_engine)


def test_greedy_tokens_and_logits_match_one_rank(single: Result, sharded: Result) -> None:
    assert_same_greedy(single, sharded)


def test_seeded_sampling_matches_one_rank(single: Result, sharded: Result) -> None:
    assert_same_seeded(single, sharded)


def test_prefix_cache_hits_as_on_one_rank(single: Result, sharded: Result) -> None:
    assert sharded[2] == single[2] > 0


@pytest.mark.parametrize(
    ("tp", "message"),
    [(3, "3 does not divide its 4 attention heads"), (4, "4 does not divide its 2 KV heads")],
)
def test_size_not_dividing_the_model_is_refused(model_dirs: dict[str, Path], tp: int, message: str) -> None:
    with pytest.raises(EngineConfigError, match=message):
        LLMEngine(config(model_dirs, tp))


@pytest.mark.timeout(60)
def test_close_stops_the_other_ranks(sharded_engine: LLMEngine, sharded: Result) -> None:
    """Last: it takes the shared engine down (a killed rank: test_tensor_parallel_failure)."""
    ranks = sharded_engine.ranks
    assert ranks is not None
    (pid,) = ranks.pids
    assert pid is not None
    sharded_engine.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert sharded_engine.ranks is None
