"""A pipeline rank that dies or hangs fails the engine with a clear error, never a hang, wherever
it sits: the last stage (which sends rank 0 the logits) or a tensor-parallel peer in a later stage."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineRankError
from engine.llm_engine import LLMEngine

pytestmark = pytest.mark.timeout(90)

PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def engine_config(model_dirs: dict[str, Path], tp: int, pp: int, timeout_s: float = 300.0) -> EngineConfig:
    return EngineConfig(
        models=(ModelSpec(name="m", path=str(model_dirs["llama"])),),
        block_size=4,
        kv_cache_bytes=1 << 20,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        distributed_timeout_s=timeout_s,
    )


def run(engine: LLMEngine, rid: str) -> None:
    engine.add_request(rid, "m", [0, 5, 6], PARAMS)
    while engine.has_work:
        engine.step()


@pytest.mark.parametrize(
    ("tp", "victim", "named"),
    [
        (1, 1, r"rank 1 \(pipeline stage 1, tensor-parallel rank 0\) exited"),
        (2, 3, r"rank 3 \(pipeline stage 1, tensor-parallel rank 1\) exited"),
    ],
)
def test_killed_rank_fails_the_engine(model_dirs: dict[str, Path], tp: int, victim: int, named: str) -> None:
    engine = LLMEngine(engine_config(model_dirs, tp, 2))
    try:
        run(engine, "ok")
        assert engine.ranks is not None
        pid = engine.ranks.pids[victim - 1]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(EngineRankError, match=named) as failed:
            run(engine, "after")
        assert failed.value.code == "engine_rank_failed"
        with pytest.raises(EngineRankError):  # the instance cannot go on
            run(engine, "later")
    finally:
        engine.close()


def test_stuck_last_stage_times_out_instead_of_hanging(model_dirs: dict[str, Path]) -> None:
    engine = LLMEngine(engine_config(model_dirs, 1, 2, timeout_s=2.0))
    try:
        assert engine.ranks is not None
        (pid,) = engine.ranks.pids
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
        with pytest.raises(EngineRankError, match="an engine rank failed"):
            run(engine, "stuck")
    finally:
        engine.close()  # kills the stopped rank rather than waiting for it
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
