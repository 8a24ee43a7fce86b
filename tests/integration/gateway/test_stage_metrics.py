"""/metrics of a real gateway: after one plain and one streamed request, every gateway stage's
histogram (``strongroom:gateway_stage_seconds``) has counted it, per model."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.stage_timer import STAGES

pytestmark = pytest.mark.integration

MODEL = "demo-chat"


def _counts(gw: Any) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{gw.base_url}/metrics", timeout=10).text
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "strongroom:gateway_stage_seconds_count":
                counts[(sample.labels["stage"], sample.labels["model_name"])] = sample.value
    return counts


@pytest.mark.parametrize("is_stream", [False, True], ids=["plain", "streamed"])
def test_every_stage_of_a_request_is_counted(stub_gateway: Any, is_stream: bool) -> None:
    before = _counts(stub_gateway)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": is_stream,
    }
    headers = {"authorization": f"Bearer {stub_gateway.token('stages', 'analyst')}"}
    answer = httpx.post(f"{stub_gateway.v1}/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    after = _counts(stub_gateway)
    for stage in STAGES:
        key = (stage, "" if stage == "auth" else MODEL)
        assert after.get(key, 0) > before.get(key, 0), f"stage {stage} not counted: {after.get(key)}"
    # A streamed answer writes two records (the decision, then the outcome); a plain one, one.
    assert after[("audit", MODEL)] - before.get(("audit", MODEL), 0) == (2 if is_stream else 1)
    assert after[("engine_total", MODEL)] - before.get(("engine_total", MODEL), 0) == 1


def test_a_refused_caller_counts_auth_and_policy_but_no_engine_stage(stub_gateway: Any) -> None:
    before = _counts(stub_gateway)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    headers = {"authorization": f"Bearer {stub_gateway.token('nobody', 'no-such-role')}"}
    answer = httpx.post(f"{stub_gateway.v1}/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 404
    after = _counts(stub_gateway)
    assert after[("auth", "")] > before.get(("auth", ""), 0)
    assert after[("policy", MODEL)] > before.get(("policy", MODEL), 0)
    assert after.get(("engine_total", MODEL), 0) == before.get(("engine_total", MODEL), 0)
