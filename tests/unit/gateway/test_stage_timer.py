from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry

from gateway.stage_timer import MAX_MODELS, OTHER_MODEL, STAGES, StageTimer, now_ns


def _count(registry: CollectorRegistry, stage: str, model: str) -> float:
    value = registry.get_sample_value(
        "strongroom:gateway_stage_seconds_count", {"stage": stage, "model_name": model}
    )
    return value or 0.0


def test_every_stage_is_exposed_from_the_start_and_counts_its_observations() -> None:
    registry = CollectorRegistry()
    timer = StageTimer(registry)
    assert all(_count(registry, stage, "") == 0.0 for stage in STAGES)
    assert (
        registry.get_sample_value(
            "strongroom:gateway_stage_seconds_count", {"stage": "quota", "model_name": ""}
        )
        == 0.0
    )
    timer.done("quota", "m", now_ns())
    timer.observe("quota", "m", 0.5)
    assert _count(registry, "quota", "m") == 2
    assert (
        registry.get_sample_value(
            "strongroom:gateway_stage_seconds_bucket", {"stage": "quota", "model_name": "m", "le": "0.25"}
        )
        == 1.0
    )


def test_model_names_beyond_the_cap_count_as_other() -> None:
    registry = CollectorRegistry()
    timer = StageTimer(registry)
    for i in range(MAX_MODELS + 10):
        timer.observe("policy", f"model-{i}", 0.001)
    assert _count(registry, "policy", f"model-{MAX_MODELS - 2}") == 1
    assert _count(registry, "policy", f"model-{MAX_MODELS + 5}") == 0
    assert _count(registry, "policy", OTHER_MODEL) == 10
    timer.observe("audit", "model-0", 0.001)  # a name bound before the cap keeps its own series
    assert _count(registry, "audit", "model-0") == 1


def test_timed_frames_observes_the_first_frame_and_the_end() -> None:
    registry = CollectorRegistry()
    timer = StageTimer(registry)

    async def frames() -> AsyncIterator[int]:
        assert _count(registry, "engine_first_token", "m") == 0
        yield 1
        assert _count(registry, "engine_first_token", "m") == 1
        yield 2
        assert _count(registry, "engine_total", "m") == 0

    async def run() -> list[int]:
        return [f async for f in timer.timed_frames(frames(), "m", now_ns())]

    assert asyncio.run(run()) == [1, 2]
    assert _count(registry, "engine_first_token", "m") == 1 and _count(registry, "engine_total", "m") == 1
