"""A streamed batch of prompts through a real gateway (stub engine), driven by the official client.

The stub engine answers ``max_tokens`` times " hello"; the keyword list blocks "hello hello
hello", so an answer of three or more tokens is stopped by the response filter.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.conftest import ServedGateway, served_gateway

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    tmp: Path = tmp_path_factory.mktemp("batch-stream")
    keywords = tmp / "keywords.txt"
    keywords.write_text("hello hello hello\n")
    env = {
        "STRONGROOM_FILTERS__KEYWORD_FILES": f'["{keywords}"]',
        "STRONGROOM_QUOTA__SUBJECTS": "{limited = {requests_per_minute = 1}}",
    }
    with served_gateway(tmp, args=("--stub-engine",), extra_env=env) as served:
        yield served


def _client(gw: ServedGateway, sub: str) -> OpenAI:
    return OpenAI(base_url=gw.v1, api_key=gw.token(sub, "analyst"), max_retries=0, timeout=30)


def _records(gw: ServedGateway, request_id: str, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        records = [r["event"] for r in gw.audit_for(request_id)]
        if len(records) >= n or time.monotonic() > deadline:
            return records  # type: ignore[return-value]
        time.sleep(0.1)


def test_a_streamed_batch_has_every_prompts_choices_one_record_pair_per_prompt_and_summed_usage(
    gw: ServedGateway,
) -> None:
    c = _client(gw, "ann")
    raw = c.completions.with_raw_response.create(
        model="demo-chat",
        prompt=["one", "two", "three"],
        n=2,
        max_tokens=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    texts: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == dict.fromkeys(range(6), " hello hello")
    alone = c.completions.create(model="demo-chat", prompt="one", n=2, max_tokens=2)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and alone.usage is not None
    assert chunks[-1].usage.completion_tokens == 3 * alone.usage.completion_tokens
    records = _records(gw, raw.headers["x-request-id"], 6)
    assert sorted(r.get("reason", "") for r in records) == ["", "", ""] + ["stream started"] * 3
    assert sum(r.get("completion_tokens", 0) for r in records) == chunks[-1].usage.completion_tokens


def test_a_prompt_blocked_midway_ends_its_choices_with_content_filter_and_the_stream_with_the_error(
    gw: ServedGateway,
) -> None:
    token = gw.token("ann", "analyst")
    body = {"model": "demo-chat", "prompt": ["one", "two"], "max_tokens": 8, "stream": True}
    response = httpx.post(f"{gw.v1}/completions", json=body, headers={"authorization": f"Bearer {token}"})
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"  # the answer is whole and on the record
    error = json.loads(lines[-2])["error"]
    assert error["code"] == "content_policy_violation"
    chunks = [json.loads(line) for line in lines[:-2]]
    finished = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks if c["choices"]}
    assert finished == {0: "content_filter", 1: "content_filter"}
    assert "hello hello hello" not in "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    records = _records(gw, response.headers["x-request-id"], 4)
    assert sorted((r["event_type"], r.get("reason", "")) for r in records) == [
        ("filter_action", "response blocked by content policy"),
        ("filter_action", "response blocked by content policy"),
        ("inference", "stream started"),
        ("inference", "stream started"),
    ]


def test_quotas_are_per_prompt_and_a_refused_prompt_refuses_the_batch_before_any_chunk(
    gw: ServedGateway,
) -> None:
    c = _client(gw, "limited")  # one request a minute: the second prompt is over it
    with pytest.raises(openai.RateLimitError) as err:
        c.completions.create(model="demo-chat", prompt=["one", "two"], max_tokens=2, stream=True)
    records = _records(gw, err.value.response.headers["x-request-id"], 1)
    assert [(r["event_type"], r["status"]) for r in records] == [("rate_limit", 429)]
