"""Who shares a model's prefix cache, counted in cache hits rather than timed (issue 18, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError
from engine.llm_engine import LLMEngine

GREEDY = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
PROMPT = [0, *range(10, 30)]
"""20 tokens after the first: five full blocks of four, all reusable but the last token's."""


@pytest.fixture(scope="module")
def engine(model_dirs: dict[str, Path]) -> LLMEngine:
    path = str(model_dirs["llama"])
    specs = (
        ModelSpec(name="default", path=path),
        ModelSpec(name="per-tenant", path=path, prefix_cache_scope="tenant"),
        ModelSpec(name="shared", path=path, prefix_cache_scope="global"),
    )
    return LLMEngine(EngineConfig(models=specs, block_size=4, kv_cache_bytes=1 << 20))


def hits(e: LLMEngine, model: str, callers: list[tuple[str | None, str | None]]) -> list[int]:
    """Prompt tokens served from the cache for each caller in turn, all sending the same prompt."""
    out = []
    for i, (tenant, subject) in enumerate(callers):
        before = e.kv_manager.num_cache_hit_tokens
        e.add_request(f"{model}-{i}", model, PROMPT, GREEDY, tenant=tenant, subject=subject)
        while e.has_work:
            e.step()
        out.append(e.kv_manager.num_cache_hit_tokens - before)
    return out


def test_by_default_only_the_same_subject_of_the_same_tenant_hits(engine: LLMEngine) -> None:
    callers = [("bank", "alice"), ("bank", "bob"), (None, "carol"), (None, "dave"), ("bank", "alice")]
    # Bob resending Alice's prompt, and two callers without a tenant, used to hit.
    assert hits(engine, "default", callers) == [0, 0, 0, 0, 20]
    assert engine.stats()["prefix_cache_hit_tokens"] == 20


def test_a_tenant_scope_shares_within_a_tenant_and_never_among_tokens_without_one(
    engine: LLMEngine,
) -> None:
    callers = [("bank", "alice"), ("bank", "bob"), ("other", "alice"), (None, "carol"), (None, "dave")]
    assert hits(engine, "per-tenant", callers) == [0, 20, 0, 0, 0]


def test_a_global_scope_shares_with_everyone(engine: LLMEngine) -> None:
    assert hits(engine, "shared", [("bank", "alice"), ("other", "bob"), (None, None)]) == [0, 20, 20]


def test_scope_names_are_checked() -> None:
    with pytest.raises(EngineConfigError, match="prefix_cache_scope"):
        ModelSpec(name="m", path="p", prefix_cache_scope="everyone")
