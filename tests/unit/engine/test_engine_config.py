"""The engine's batch limits: the device's defaults, filled in once, and what a config sets."""

from __future__ import annotations

import msgspec
import pytest

from engine.config import EngineConfig
from engine.errors import EngineConfigError
from strongroom.config import Settings


def test_a_gpu_engine_runs_256_sequences_and_8192_tokens_a_step_unless_told() -> None:
    # At 64 sequences an H200 serving long answers at 32 req/s queued arrivals for a free slot
    # (TTFT p99 0.6-1.3 s, bench/BENCHMARKS.md); the GPU's step costs about the same at 256 rows.
    gpu = EngineConfig(device="cuda")
    assert (gpu.max_num_seqs, gpu.max_num_batched_tokens) == (256, 8192)
    assert (gpu.seq_limit, gpu.token_budget) == (256, 8192)
    assert EngineConfig(device="cuda:1").seq_limit == 256
    cpu = EngineConfig()
    assert (cpu.max_num_seqs, cpu.max_num_batched_tokens) == (64, 2048)


def test_what_the_config_sets_wins_on_every_device() -> None:
    for device in ("cpu", "cuda"):
        config = EngineConfig(device=device, max_num_seqs=8, max_num_batched_tokens=512)
        assert (config.seq_limit, config.token_budget) == (8, 512)
    with pytest.raises(EngineConfigError, match="max_num_seqs"):
        EngineConfig(device="cuda", max_num_seqs=0)


def test_the_served_settings_fill_in_the_devices_defaults() -> None:
    settings = msgspec.convert({"engine": {"device": "cuda"}}, Settings)
    assert settings.engine.seq_limit == 256
    # Written back out (a config dump, a rank's copy), the filled-in figure travels, not None.
    again = msgspec.convert(msgspec.to_builtins(settings.engine), EngineConfig)
    assert (again.max_num_seqs, again.max_num_batched_tokens) == (256, 8192)
