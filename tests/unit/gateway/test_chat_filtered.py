"""Every piece of a chat's caller text reaches the filters, and the engine gets what they left."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.chat_filtered import ChatFiltered, audited_messages, tool_texts
from gateway.openai_types import ChatCompletionRequest
from gateway.tool_plan import ToolPlan

TOOL = {
    "type": "function",
    "function": {"name": "pay", "description": "pays", "parameters": {"type": "object"}},
}
BODY: dict[str, Any] = {
    "model": "m",
    "tools": [TOOL],
    "messages": [
        {"role": "user", "content": "pay 5"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "pay", "arguments": '{"iban": "X1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ],
}


def body() -> ChatCompletionRequest:
    return msgspec.json.decode(json.dumps(BODY), type=ChatCompletionRequest)


def test_arguments_and_definitions_follow_the_contents_and_come_back_filtered() -> None:
    req = body()
    texts = [m.text() for m in req.messages] + tool_texts(req)
    assert texts[3] == '{"iban": "X1"}' and json.loads(texts[4]) == TOOL
    filtered = [t.replace("X1", "[REDACTED:IBAN]").replace("pays", "[REDACTED:X]") for t in texts]
    plan = ToolPlan.of(req, "hermes", "m")
    chat = ChatFiltered.of(req, filtered, plan)
    call = chat.messages[1].tool_calls
    assert call == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "pay", "arguments": {"iban": "[REDACTED:IBAN]"}},
        }
    ]
    assert chat.messages[2].tool_call_id == "call_1"
    assert chat.tools is not None and chat.tools[0]["function"]["description"] == "[REDACTED:X]"
    # Unset tool fields are left out of what the template sees.
    assert msgspec.to_builtins(chat.messages[0]) == {"role": "user", "content": "pay 5"}


def test_the_audit_prompt_carries_definitions_calls_and_results() -> None:
    record = audited_messages(body())
    assert record[0] == {"role": "tools", "tools": [TOOL]}
    assert record[2]["tool_calls"][0]["function"]["arguments"] == '{"iban": "X1"}'
    assert record[3] == {"role": "tool", "content": "done", "tool_call_id": "call_1"}


def test_mistral_templates_get_nine_character_call_ids_that_still_pair_up() -> None:
    req = body()
    texts = [m.text() for m in req.messages] + tool_texts(req)
    chat = ChatFiltered.of(req, texts, ToolPlan.of(req, "mistral", "m"))
    calls = chat.messages[1].tool_calls
    assert calls is not None
    call_id = calls[0]["id"]
    assert len(call_id) == 9 and call_id.isalnum() and chat.messages[2].tool_call_id == call_id
    hermes = ChatFiltered.of(req, texts, ToolPlan.of(req, "hermes", "m"))
    assert hermes.messages[2].tool_call_id == "call_1"  # other families keep the client's ids
