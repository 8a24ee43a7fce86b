"""A tensor-parallel rank that dies fails every open stream at once and stops the instance."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineRankError, EngineUnavailableError
from engine.serving.async_engine import AsyncEngine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
        deltas = [d async for d in engine.generate("ok", "m", [0, 5, 6], params)]
        assert deltas[-1].finish_reason == "length"
        ranks = engine.core.ranks
        assert ranks is not None
        (pid,) = ranks.pids
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(EngineRankError, match="tensor-parallel rank 1 exited"):
            async for _ in engine.generate("after", "m", [0, 5, 6], params):
                pass
        assert len(fatal) == 1 and fatal[0].code == "engine_rank_failed"
        with pytest.raises(EngineUnavailableError):
            async for _ in engine.generate("later", "m", [0, 5, 6], params):
                pass
    finally:
        await engine.shutdown()
