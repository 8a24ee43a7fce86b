"""Tool calls through the real gateway and engine (demo models), driven by the official openai SDK.

The demo models are noise: with ``tool_choice`` ``required`` or a named function the grammar makes
them write a valid call in their template's Hermes syntax, which is what these tests lean on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Zurich", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
FX = {
    "type": "function",
    "function": {
        "name": "fx_rate",
        "parameters": {
            "type": "object",
            "properties": {"pair": {"type": "string", "enum": ["EURUSD", "USDCHF"]}},
            "required": ["pair"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, FX)}


@pytest.fixture
def c(gateway: Any) -> Iterator[OpenAI]:
    with OpenAI(
        base_url=gateway.v1, api_key=gateway.token("alice", "analyst"), max_retries=0, timeout=60
    ) as sdk:
        yield sdk


def audited(gateway: Any, request_id: str) -> list[dict[str, Any]]:
    for _ in range(20):
        if records := gateway.audit_for(request_id):
            return records
        time.sleep(0.1)
    raise AssertionError(f"no audit record for {request_id}")


def valid_calls(calls: Any) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, SCHEMAS[call.function.name])
        out.append((call.function.name, args))
    return out


def test_a_tool_loop_call_then_tool_message_then_answer(c: OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = c.chat.completions.create(
        model="demo-chat",
        messages=messages,
        tools=[WEATHER, FX],
        tool_choice="required",
        max_tokens=400,
        seed=1,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and valid_calls(calls)
    messages.append(choice.message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 4}'} for call in calls]
    second = c.chat.completions.create(
        model="demo-chat", messages=messages, tools=[WEATHER, FX], tool_choice="none", max_tokens=8, seed=1
    )
    answer = second.choices[0]
    assert answer.message.tool_calls is None and answer.finish_reason in ("stop", "length")
    # The history (the call and the result) reached the template: the prompt grew by both.
    assert second.usage and first.usage
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 20


def test_named_function_and_single_call(c: OpenAI) -> None:
    for seed in (1, 2, 3):
        done = c.chat.completions.create(
            model="demo-chat",
            messages=[{"role": "user", "content": "EUR in USD?"}],
            tools=[WEATHER, FX],
            tool_choice={"type": "function", "function": {"name": "fx_rate"}},
            parallel_tool_calls=False,
            max_tokens=200,
            seed=seed,
        )
        calls = valid_calls(done.choices[0].message.tool_calls or [])
        assert [name for name, _ in calls] == ["fx_rate"]


def test_streamed_tool_calls_are_reassembled_by_the_sdk(c: OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": "demo-chat",
        "messages": [{"role": "user", "content": "Weather in Zurich?"}],
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 200,
        "seed": 7,
    }
    whole = c.chat.completions.create(**kwargs)
    with c.beta.chat.completions.stream(**kwargs) as stream:
        pieces = [e for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls or []
    assert len(pieces) > 1  # the arguments came in pieces, not one blob
    assert final.choices[0].finish_reason == "tool_calls"
    # Same seed, same call: the streamed arguments are the whole answer's, byte for byte.
    assert [(t.function.name, t.function.arguments) for t in streamed] == [
        (t.function.name, t.function.arguments) for t in whole.choices[0].message.tool_calls or []
    ]
    assert valid_calls(streamed)
    with c.chat.completions.create(**kwargs, stream=True) as raw:
        deltas = [ch.choices[0].delta for ch in raw if ch.choices and ch.choices[0].delta.tool_calls]
    head = deltas[0].tool_calls[0]  # type: ignore[index]
    assert head.id and head.id.startswith("call_") and head.function and head.function.name == "get_weather"
    assert all(d.tool_calls[0].id is None for d in deltas[1:])  # type: ignore[index]


def test_bad_tool_definitions_and_choices_are_400s_naming_the_param(c: OpenAI) -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
            "tools[0].function.parameters",
        ),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
    ]
    broken = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}},
    }
    bad.append(({"tools": [broken], "tool_choice": "required"}, "tools"))  # the grammar compiler's 400
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(
                model="demo-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4, **extra
            )
        assert err.value.body["param"] == param, extra  # type: ignore[index]


def test_tool_content_goes_through_the_filters_and_the_audit_record(gateway: Any, c: OpenAI) -> None:
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7v9z\n-----END RSA PRIVATE KEY-----"
    history: list[Any] = [
        {"role": "user", "content": "store it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "fx_rate", "arguments": json.dumps({"k": key})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    with pytest.raises(openai.BadRequestError) as err:  # a secret in a call's arguments: blocked
        c.chat.completions.create(model="demo-chat", messages=history, tools=[FX], max_tokens=4)
    assert err.value.body["code"] == "content_policy_violation"  # type: ignore[index]
    [record] = audited(gateway, err.value.response.headers["x-request-id"])
    assert [f["type"] for f in record["event"]["findings"]] == ["secret"]

    described = json.loads(json.dumps(FX))
    described["function"]["description"] = "Rates; questions to zhang.san@example.com"
    raw = c.chat.completions.with_raw_response.create(  # an email in a definition: redacted
        model="demo-chat", messages=[{"role": "user", "content": "hi"}], tools=[described], max_tokens=2
    )
    [done] = audited(gateway, raw.headers["x-request-id"])
    assert {"type": "email", "count": 1, "action": "redact", "direction": "request"} in done["event"][
        "findings"
    ]

    mailer = {
        "type": "function",
        "function": {
            "name": "send",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string", "pattern": "^[a-z]{4}[.][a-z]{3}[@]bank[.]ch$"}},
                "required": ["to"],
                "additionalProperties": False,
            },
        },
    }
    for stream in (False, True):  # an email the model writes into the arguments: redacted
        kwargs: dict[str, Any] = {
            "model": "demo-chat",
            "messages": [{"role": "user", "content": "mail"}],
            "tools": [mailer],
            "tool_choice": "required",
            "max_tokens": 200,
            "seed": 3,
        }
        if stream:
            with c.beta.chat.completions.stream(**kwargs) as s:
                call = (s.get_final_completion().choices[0].message.tool_calls or [])[0]
        else:
            call = (c.chat.completions.create(**kwargs).choices[0].message.tool_calls or [])[0]
        assert json.loads(call.function.arguments) == {"to": "[REDACTED:EMAIL]"}, stream
