"""Issue 21's conformance findings, one by one, through the real gateway and engine (demo models)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

CHAT = {"model": "demo-chat", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12}
COMPLETION = {"model": "demo-chat", "prompt": "Once upon", "max_tokens": 12}


@pytest.fixture(scope="module")
def api(gateway: Any) -> Iterator[httpx.Client]:
    """One token for the module (minting one runs the CLI, about a second)."""
    token = gateway.token("alice", "analyst")
    with httpx.Client(
        base_url=gateway.v1, headers={"authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        yield client


def post(api: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return api.post(path, json=body)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_chat_answer_has_refusal_and_a_string_fingerprint(api: httpx.Client) -> None:
    answer = post(api, "/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 2}).json()
    message = answer["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None
    assert answer["choices"][0]["logprobs"]["refusal"] is None
    assert isinstance(answer["system_fingerprint"], str) and answer["system_fingerprint"].startswith("fp_")
    again = post(api, "/chat/completions", CHAT).json()
    assert again["system_fingerprint"] == answer["system_fingerprint"]  # same model, same fingerprint


def test_logprob_bytes_are_the_tokens_own_and_rebuild_the_text(api: httpx.Client) -> None:
    # The demo vocabulary splits CJK characters into byte tokens: several end mid-character.
    body = {**CHAT, "max_tokens": 60, "seed": 7, "temperature": 1.0, "logprobs": True, "top_logprobs": 1}
    choice = post(api, "/chat/completions", body).json()["choices"][0]
    entries = choice["logprobs"]["content"]
    joined = b"".join(bytes(e["bytes"]) for e in entries)
    assert joined.decode("utf-8", errors="replace") == choice["message"]["content"]
    partial = [e for e in entries if "\ufffd" in e["token"]]
    assert partial, "no token ended inside a character; pick another seed"
    assert all(bytes(e["bytes"]) != e["token"].encode() for e in partial)
    for e in entries:
        top = e["top_logprobs"][0]
        assert isinstance(top["bytes"], list) and all(0 <= b < 256 for b in top["bytes"])


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat/completions", {**CHAT, "n": None, "stream": None, "logprobs": None, "stop": None}),
        ("/completions", {**COMPLETION, "n": None, "stream": None, "echo": None, "logprobs": None}),
        ("/completions", {**COMPLETION, "prompt": None}),
        ("/completions", {**COMPLETION, "prompt": ""}),
        ("/completions", {**COMPLETION, "best_of": 1, "suffix": "", "stop": ["\n", "."]}),
        ("/chat/completions", {**CHAT, "store": False, "service_tier": "auto", "modalities": ["text"]}),
        ("/chat/completions", {**CHAT, "metadata": {"team": "risk"}, "user": "u-1", "prompt_cache_key": "k"}),
        ("/chat/completions", {**CHAT, "seed": 3.0, "n": 2.0}),  # JSON integers written as 3.0
    ],
)
def test_nulls_defaults_and_accepted_by_design_parameters_are_served(
    api: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    response = post(api, path, body)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == int(body.get("n") or 1)


def test_top_p_zero_is_the_top_token(api: httpx.Client) -> None:
    greedy = post(api, "/completions", {**COMPLETION, "temperature": 0}).json()
    nucleus = post(api, "/completions", {**COMPLETION, "top_p": 0, "temperature": 1.5, "seed": 1}).json()
    assert nucleus["choices"][0]["text"] == greedy["choices"][0]["text"]


def test_logit_bias_bans_and_forces_tokens(api: httpx.Client) -> None:
    body = {**COMPLETION, "temperature": 0, "logprobs": 0, "max_tokens": 6}
    greedy = post(api, "/completions", body).json()["choices"][0]
    first = greedy["logprobs"]["tokens"][0]
    forced = post(api, "/completions", {**body, "logit_bias": {"300": 100}}).json()["choices"][0]
    tokens = forced["logprobs"]["tokens"]
    assert len(set(tokens)) == 1 and tokens[0] != first  # token 300, six times
    banned = {str(i): -100 for i in range(512) if i != 300}
    again = post(api, "/completions", {**body, "logit_bias": banned}).json()["choices"][0]
    assert again["logprobs"]["tokens"] == tokens
    refused = post(api, "/completions", {**body, "logit_bias": {"512": 1}})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logit_bias"
    refused = post(api, "/completions", {**body, "logit_bias": {"1": 101}})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**CHAT, "audio": {"voice": "alloy", "format": "mp3"}}, "audio"),
        ({**CHAT, "modalities": ["text", "audio"]}, "modalities"),
        ({**CHAT, "prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({**CHAT, "web_search_options": {}}, "web_search_options"),
        ({**CHAT, "reasoning_effort": "low"}, "reasoning_effort"),
        ({**CHAT, "store": True}, "store"),
        ({**CHAT, "service_tier": "flex"}, "service_tier"),
        (
            {
                **CHAT,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what is this?"},
                            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                        ],
                    }
                ],
            },
            "messages[0].content[1].type",
        ),
    ],
)
def test_unsupported_chat_parameters_are_400s_naming_them(
    api: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = post(api, "/chat/completions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (
        param,
        "unsupported_parameter",
        "invalid_request_error",
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**COMPLETION, "best_of": 3}, "best_of"),
        ({**COMPLETION, "suffix": "the end"}, "suffix"),
        ({**COMPLETION, "echo": True, "logprobs": 1}, "echo"),
        ({**COMPLETION, "prompt": ["one"] * 17}, "prompt"),
    ],
)
def test_unsupported_completion_parameters_are_400s_naming_them(
    api: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = post(api, "/completions", body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_max_tokens_beyond_the_model_or_the_context_is_a_400(api: httpx.Client) -> None:
    too_large = post(api, "/chat/completions", {**CHAT, "max_tokens": 100_000})
    assert too_large.status_code == 400
    assert too_large.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "invalid_value",
    }
    named = post(api, "/chat/completions", {**CHAT, "max_completion_tokens": 100_000})
    assert named.json()["error"]["param"] == "max_completion_tokens"
    # 2,047 completion tokens fit the model (2,048) but not with the prompt: never silently cut.
    overflow = post(api, "/completions", {**COMPLETION, "max_tokens": 2047})
    assert overflow.status_code == 400
    assert (overflow.json()["error"]["code"], overflow.json()["error"]["param"]) == (
        "context_length_exceeded",
        "prompt",
    )


def test_completion_chunks_carry_usage_only_when_asked(api: httpx.Client) -> None:
    plain = events(post(api, "/completions", {**COMPLETION, "stream": True}))
    assert all("usage" not in chunk for chunk in plain)
    assert all(isinstance(chunk["system_fingerprint"], str) for chunk in plain)
    asked = events(
        post(api, "/completions", {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}})
    )
    assert "usage" not in asked[0] and asked[-1]["usage"]["completion_tokens"] == 12


def test_a_wrong_method_is_a_405_with_allow(api: httpx.Client) -> None:
    response = api.get("/chat/completions")
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


def test_echo_prepends_the_prompt_to_every_choice(api: httpx.Client) -> None:
    body = {**COMPLETION, "n": 2, "seed": 5, "temperature": 1.0}
    plain = post(api, "/completions", body).json()["choices"]
    echoed = post(api, "/completions", {**body, "echo": True}).json()["choices"]
    assert [c["text"] for c in echoed] == [COMPLETION["prompt"] + c["text"] for c in plain]
    chunks = events(post(api, "/completions", {**body, "echo": True, "stream": True}))
    streamed = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk["choices"]:
            streamed[choice["index"]] += choice["text"]
    assert [streamed[0], streamed[1]] == [c["text"] for c in echoed]


def test_a_batch_of_prompts_gets_n_choices_each_with_their_indices(api: httpx.Client) -> None:
    body = {**COMPLETION, "n": 2, "seed": 9, "temperature": 1.0, "max_tokens": 5}
    alone = [post(api, "/completions", {**body, "prompt": p}).json() for p in ("one", "two", "three")]
    batch = post(api, "/completions", {**body, "prompt": ["one", "two", "three"]}).json()
    assert [c["index"] for c in batch["choices"]] == list(range(6))
    assert [c["text"] for c in batch["choices"]] == [c["text"] for a in alone for c in a["choices"]]
    assert batch["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
    assert batch["usage"]["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in alone)
    echoed = post(api, "/completions", {**body, "prompt": ["one", "two"], "echo": True}).json()
    assert [c["text"][:3] for c in echoed["choices"]] == ["one", "one", "two", "two"]


def test_a_streamed_batch_interleaves_prompts_under_their_indices_and_sums_usage(api: httpx.Client) -> None:
    body = {**COMPLETION, "n": 2, "seed": 9, "temperature": 1.0, "max_tokens": 5}
    batch = post(api, "/completions", {**body, "prompt": ["one", "two", "three"]}).json()
    streamed = {
        **body,
        "prompt": ["one", "two", "three"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = events(post(api, "/completions", streamed))
    assert len({c["id"] for c in chunks}) == 1  # one answer, as OpenAI streams a batch
    texts: dict[int, str] = {}
    finished: dict[int, str] = {}
    for chunk in chunks[:-1]:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                finished[choice["index"]] = choice["finish_reason"]
    assert sorted(texts) == list(range(6)) and sorted(finished) == list(range(6))
    assert [texts[i] for i in range(6)] == [c["text"] for c in batch["choices"]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == batch["usage"]
