"""A chat's every piece of caller text in one fixed order, and the chat rebuilt from it once filtered.

The request filters read plain texts. A chat carries them in three places, and all three go
through the filters (a secret in a call's arguments or in a tool's description is as much
content as one in a message):

    texts = [message contents…] + [arguments of each assistant tool call…] + [each tool's JSON…]

``tool_texts`` lists the last two groups; ``ChatFiltered.of`` puts the filtered texts back where
they came from, for the engine. The audit record's prompt keeps the same pieces as the client
sent them (``audited_messages``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.serving.protocol import ChatMessage
from gateway.errors import BadRequestError
from gateway.openai_types import ChatCompletionRequest, ChatMessageIn
from gateway.tool_plan import ToolPlan

__all__ = ["ChatFiltered", "audited_messages", "tool_texts"]


def tool_texts(body: ChatCompletionRequest) -> list[str]:
    """The call arguments in the history, then the tool definitions as JSON."""
    arguments = [call.function.arguments for m in body.messages for call in m.tool_calls or ()]
    return arguments + [msgspec.json.encode(tool).decode() for tool in body.tools or ()]


@dataclass(frozen=True)
class ChatFiltered:
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None

    @classmethod
    def of(cls, body: ChatCompletionRequest, texts: list[str], plan: ToolPlan | None) -> ChatFiltered:
        num = len(body.messages)
        contents, rest = texts[:num], texts[num:]
        ids = _template_id if plan is not None and plan.syntax == "mistral" else _same_id
        messages = []
        for m, content in zip(body.messages, contents, strict=True):
            calls = None
            if m.tool_calls:
                calls, rest = _calls(m, rest[: len(m.tool_calls)], ids), rest[len(m.tool_calls) :]
            call_id = ids(m.tool_call_id) if m.tool_call_id is not None else None
            messages.append(
                ChatMessage(role=m.role, content=content, tool_calls=calls, tool_call_id=call_id, name=m.name)
            )
        tools = None
        if plan is not None:
            tools = []
            for i, text in enumerate(rest):
                try:
                    tools.append(json.loads(text))
                except json.JSONDecodeError:
                    raise BadRequestError(
                        "the content policy left this tool definition unreadable", param=f"tools[{i}]"
                    ) from None
        return cls(messages=messages, tools=tools)


def _same_id(call_id: str) -> str:
    return call_id


def _template_id(call_id: str) -> str:
    """Mistral's templates refuse call ids that are not 9 letters or digits (OpenAI's are
    ``call_…``): the same id always maps to the same 9 characters, so a call and its result
    still pair up."""
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _calls(message: ChatMessageIn, arguments: list[str], ids: Callable[[str], str]) -> list[dict[str, Any]]:
    """HF templates read a call's arguments as an object (``arguments | tojson``)."""
    out = []
    for call, text in zip(message.tool_calls or (), arguments, strict=True):
        try:
            parsed: Any = json.loads(text)
        except json.JSONDecodeError:
            parsed = text
        out.append(
            {
                "id": ids(call.id),
                "type": "function",
                "function": {"name": call.function.name, "arguments": parsed},
            }
        )
    return out


def audited_messages(body: ChatCompletionRequest) -> list[dict[str, Any]]:
    """``[{"role", "content"}]`` in order, with ``tool_calls`` / ``tool_call_id`` where a message
    has them, led by ``{"role": "tools", "tools": [...]}`` when the request defines tools."""
    out: list[dict[str, Any]] = []
    if body.tools:
        out.append({"role": "tools", "tools": msgspec.to_builtins(body.tools)})
    for m in body.messages:
        entry: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.tool_calls:
            entry["tool_calls"] = msgspec.to_builtins(m.tool_calls)
        if m.tool_call_id is not None:
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out
