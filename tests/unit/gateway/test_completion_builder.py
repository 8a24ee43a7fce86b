"""CompletionBuilder: engine deltas per choice into one OpenAI body, shaped by a ResponseShape."""

from __future__ import annotations

import json

from engine.serving.protocol import DeltaEvent, LogprobEntry
from gateway.completion_builder import CompletionBuilder
from gateway.response_shape import ResponseShape


def _lp(token: str) -> list[LogprobEntry]:
    return [LogprobEntry(token_id=1, token=token, logprob=-0.25, top=[(token, -0.25)])]


def _deltas() -> list[DeltaEvent]:
    return [
        DeltaEvent(
            index=1, text="b1", token_ids=[5], num_prompt_tokens=7, num_output_tokens=1, logprobs=_lp("b1")
        ),
        DeltaEvent(
            index=0, text="a1", token_ids=[3], num_prompt_tokens=7, num_output_tokens=1, logprobs=_lp("a1")
        ),
        DeltaEvent(
            index=0, text=" a2", token_ids=[4], num_output_tokens=2, logprobs=_lp(" a2"), finish_reason="stop"
        ),
        DeltaEvent(index=1, text="", token_ids=[], num_output_tokens=1, finish_reason="length"),
    ]


def test_chat_choices_in_index_order_with_usage_and_logprobs() -> None:
    builder = CompletionBuilder(
        ResponseShape(is_chat=True, model="m", num_choices=2, wants_logprobs=True), lambda: 1000.0
    )
    for event in _deltas():
        builder.add(event)
    assert builder.texts() == {0: "a1 a2", 1: "b1"}
    body = json.loads(builder.encode())
    assert body["id"].startswith("chatcmpl-") and body["created"] == 1000 and body["model"] == "m"
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "a1 a2", "stop"),
        (1, "b1", "length"),
    ]
    assert [e["token"] for e in body["choices"][0]["logprobs"]["content"]] == ["a1", " a2"]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_rewritten_text_loses_its_logprobs_and_a_blocked_choice_says_content_filter() -> None:
    builder = CompletionBuilder(ResponseShape(is_chat=False, model="m", num_choices=2, wants_logprobs=True))
    for event in _deltas():
        builder.add(event)
    builder.replace(0, "a1 [MASKED]", blocked=False)
    builder.replace(1, "", blocked=True)
    body = json.loads(builder.encode())
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    first, second = body["choices"]
    assert first["text"] == "a1 [MASKED]" and first["logprobs"]["tokens"] == []
    assert second["text"] == "" and second["finish_reason"] == "content_filter"
    assert builder.any_blocked


def test_no_logprobs_unless_asked() -> None:
    builder = CompletionBuilder(ResponseShape(is_chat=True, model="m", num_choices=2))
    for event in _deltas():
        builder.add(event)
    assert all(c["logprobs"] is None for c in json.loads(builder.encode())["choices"])
