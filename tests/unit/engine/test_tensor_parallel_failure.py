"""A tensor-parallel rank that dies or hangs fails the engine with a clear error, never a hang."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineRankError, EngineUnavailableError
from engine.llm_engine import LLMEngine
from engine.serving.async_engine import AsyncEngine
from engine.serving.protocol import GenerateRequest

pytestmark = pytest.mark.timeout(60)


def request(rid: str, params: SamplingParams) -> GenerateRequest:
    return GenerateRequest(request_id=rid, model="m", params=params, prompt_token_ids=[0, 5, 6])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_killed_rank_fails_streams_and_stops_the_engine(model_dirs: dict[str, Path]) -> None:
    config = EngineConfig(
        models=(ModelSpec(name="m", path=str(model_dirs["qwen3"])),),
        block_size=4,
        kv_cache_bytes=1 << 20,
        tensor_parallel_size=2,
    )
    fatal: list[EngineRankError] = []
    engine = AsyncEngine(config, on_fatal=fatal.append)
    await engine.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        frames = [f async for f in engine.generate(request("ok", params))]
        assert frames[-1][-1].finish_reason == "length"
        ranks = engine.core.ranks
        assert ranks is not None
        (pid,) = ranks.pids
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(EngineRankError, match="tensor-parallel rank 1 exited"):
            async for _ in engine.generate(request("after", params)):
                pass
        assert len(fatal) == 1 and fatal[0].code == "engine_rank_failed"
        with pytest.raises(EngineUnavailableError):
            async for _ in engine.generate(request("later", params)):
                pass
    finally:
        await engine.shutdown()


def test_stuck_rank_times_out_instead_of_hanging(model_dirs: dict[str, Path]) -> None:
    config = EngineConfig(
        models=(ModelSpec(name="m", path=str(model_dirs["qwen3"])),),
        block_size=4,
        kv_cache_bytes=1 << 20,
        tensor_parallel_size=2,
        distributed_timeout_s=2.0,
    )
    engine = LLMEngine(config)
    try:
        assert engine.ranks is not None
        (pid,) = engine.ranks.pids
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
        engine.add_request("stuck", "m", [0, 5, 6], SamplingParams(temperature=0, max_tokens=2))
        with pytest.raises(EngineRankError, match="a tensor-parallel rank failed"):
            engine.step()
    finally:
        engine.close()  # kills the stopped rank rather than waiting for it
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
