"""Collects engine deltas into OpenAI completion bodies, per choice index."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from engine.serving.protocol import DeltaEvent, LogprobEntry
from gateway.openai_types import (
    ChatChoice,
    ChatCompletion,
    ChatLogprobs,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    TokenLogprobOut,
    ToolCall,
    ToolFunction,
    TopLogprob,
    Usage,
)
from gateway.response_shape import ResponseShape
from gateway.tool_call_parser import parse_whole

__all__ = ["ChoiceState", "CompletionBuilder", "chat_logprobs", "completion_logprobs"]


@dataclass
class ChoiceState:
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    num_output_tokens: int = 0
    logprobs: list[LogprobEntry] = field(default_factory=list)
    blocked: bool = False

    def add(self, event: DeltaEvent) -> None:
        self.text.append(event.text)
        self.num_output_tokens = max(self.num_output_tokens, event.num_output_tokens)
        if event.logprobs:
            self.logprobs.extend(event.logprobs)
        if event.finish_reason is not None:
            self.finish_reason = event.finish_reason


def chat_logprobs(entries: list[LogprobEntry]) -> ChatLogprobs:
    return ChatLogprobs(
        content=[
            TokenLogprobOut(
                token=e.token,
                logprob=e.logprob,
                bytes=_bytes(e.bytes, e.token),
                top_logprobs=[
                    TopLogprob(
                        token=t, logprob=lp, bytes=_bytes(e.top_bytes[i] if i < len(e.top_bytes) else [], t)
                    )
                    for i, (t, lp) in enumerate(e.top)
                ],
            )
            for e in entries
        ]
    )


def _bytes(raw: list[int], token: str) -> list[int]:
    """The engine's token bytes; an engine that sends none (the stub) gets the text's UTF-8."""
    return raw if raw else list(token.encode())


def completion_logprobs(entries: list[LogprobEntry], start: int = 0) -> CompletionLogprobs:
    offsets, pos = [], start
    for e in entries:
        offsets.append(pos)
        pos += len(e.token)
    return CompletionLogprobs(
        tokens=[e.token for e in entries],
        token_logprobs=[e.logprob for e in entries],
        top_logprobs=[dict(e.top) for e in entries],
        text_offset=offsets,
    )


class CompletionBuilder:
    """A non-streamed answer: every choice's deltas gathered, then encoded once."""

    def __init__(self, shape: ResponseShape, clock: Callable[[], float] = time.time) -> None:
        self._shape = shape
        self._created = int(clock())
        self._id = shape.id_prefix + secrets.token_hex(12)
        self._choices: dict[int, ChoiceState] = {}
        self._num_prompt_tokens = 0

    def add(self, event: DeltaEvent) -> None:
        self._num_prompt_tokens = max(self._num_prompt_tokens, event.num_prompt_tokens)
        self._choices.setdefault(event.index, ChoiceState()).add(event)

    def texts(self) -> dict[int, str]:
        return {i: "".join(c.text) for i, c in sorted(self._choices.items())}

    def replace(self, index: int, text: str, *, blocked: bool) -> None:
        choice = self._choices[index]
        if text != "".join(choice.text):
            # Token logprobs spell out the original text: they go wherever the filter rewrote it.
            choice.logprobs = []
        choice.text = [text]
        if blocked:
            choice.blocked = True
            choice.finish_reason = "content_filter"
            choice.logprobs = []

    @property
    def any_blocked(self) -> bool:
        return any(c.blocked for c in self._choices.values())

    def usage(self) -> Usage:
        completion = sum(c.num_output_tokens for c in self._choices.values())
        return Usage(
            prompt_tokens=self._num_prompt_tokens,
            completion_tokens=completion,
            total_tokens=self._num_prompt_tokens + completion,
        )

    def _chat_choice(self, index: int, choice: ChoiceState) -> ChatChoice:
        text, finish = "".join(choice.text), choice.finish_reason
        message = ChatMessageOut(content=text)
        if self._shape.tool_syntax and not choice.blocked:
            content, calls = parse_whole(self._shape.tool_syntax, text, max_calls=self._shape.max_tool_calls)
            if calls:
                message = ChatMessageOut(
                    content=content or None,
                    tool_calls=[
                        ToolCall(id=c.id, function=ToolFunction(name=c.name, arguments=c.arguments))
                        for c in calls
                    ],
                )
                finish = "tool_calls" if finish == "stop" else finish
        return ChatChoice(
            index=index,
            message=message,
            finish_reason=finish,
            logprobs=chat_logprobs(choice.logprobs) if self._shape.wants_logprobs else None,
        )

    def encode(self) -> bytes:
        return msgspec.json.encode(self.build())

    def build(self) -> ChatCompletion | Completion:
        """The answer, once every delta is in and the response filters have replaced what they must."""
        model = self._shape.model
        wants_logprobs = self._shape.wants_logprobs
        if self._shape.is_chat:
            chat = ChatCompletion(
                id=self._id,
                created=self._created,
                model=model,
                usage=self.usage(),
                system_fingerprint=self._shape.system_fingerprint,
                choices=[self._chat_choice(i, c) for i, c in sorted(self._choices.items())],
            )
            return chat
        return Completion(
            id=self._id,
            created=self._created,
            model=model,
            usage=self.usage(),
            system_fingerprint=self._shape.system_fingerprint,
            choices=[
                CompletionChoice(
                    index=i,
                    text=self._shape.echo + "".join(c.text),
                    finish_reason=c.finish_reason,
                    logprobs=completion_logprobs(c.logprobs) if wants_logprobs else None,
                )
                for i, c in sorted(self._choices.items())
            ],
        )
