"""The chunks of a streamed completion, with the response filter's hold-back window.

Text from the engine goes through one ``StreamFilter`` per choice; only what the filter
releases is sent, so a sensitive value split across tokens never reaches the client. A blocked
choice ends with ``finish_reason: "content_filter"`` and the stream with an error
(``filter_error``). The chunks are typed (``gateway.stream_events``): ``gateway.sse`` writes them
as server-sent events, ``gateway.grpc_api`` as protobuf messages.
When the request has tools, released text then goes through a ``ToolCallParser``, so calls
leave as ``tool_calls`` deltas (first the id and name, then pieces of the arguments) built
from text the filters have already passed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from time import perf_counter_ns

from common.finding import Finding
from engine.serving.protocol import DeltaEvent, LogprobEntry
from filters import FilterContext, FilterPipeline, StreamFilter
from gateway.completion_builder import chat_logprobs, completion_logprobs
from gateway.errors import ContentPolicyError
from gateway.openai_types import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChunkDelta,
    CompletionChoice,
    CompletionChunk,
    FunctionDelta,
    ToolCallDelta,
    Usage,
)
from gateway.response_shape import ResponseShape
from gateway.stream_events import StreamChunk, StreamError
from gateway.tool_call_parser import Arguments, CallStart, Content, ToolCallParser

__all__ = ["StreamWriter"]


class _Choice:
    def __init__(self, sf: StreamFilter, calls: ToolCallParser | None) -> None:
        self.filter = sf
        self.calls = calls
        self.finished = False
        self.num_output_tokens = 0
        self.unreleased = ""
        """The engine's text after what was released unchanged: what the next release should
        start with while nothing is rewritten (held back by the filter, so short)."""
        self.num_fed = 0
        self.released: list[str] = []
        self.num_released = 0
        self.pending_logprobs: list[tuple[int, list[LogprobEntry]]] = []
        """(end offset in the engine's text, entries): held until that text is released as is."""
        self.rewritten = False

    def feed(self, text: str, logprobs: list[LogprobEntry] | None) -> None:
        if not self.rewritten:
            self.unreleased += text
        self.num_fed += len(text)
        if logprobs:
            self.pending_logprobs.append((self.num_fed, logprobs))

    def release(self, text: str) -> list[LogprobEntry]:
        """Record released text; return the logprobs that may go out with it.

        Logprobs spell out tokens, so they leave only for text the client sees unchanged: once
        the filter has rewritten anything (mask, redact), the rest of this choice's logprobs
        are dropped.
        """
        self.released.append(text)
        self.num_released += len(text)
        if not self.rewritten:
            if self.unreleased.startswith(text):
                self.unreleased = self.unreleased[len(text) :]
            else:
                self.rewritten = True
                self.unreleased = ""
        if self.rewritten:
            self.pending_logprobs.clear()
            return []
        out: list[LogprobEntry] = []
        while self.pending_logprobs and self.pending_logprobs[0][0] <= self.num_released:
            out.extend(self.pending_logprobs.pop(0)[1])
        return out


class StreamWriter:
    """One streamed answer: engine deltas in, filtered chunks out (``fctx``: whom the response
    filters judge for)."""

    def __init__(
        self,
        shape: ResponseShape,
        filters: FilterPipeline,
        fctx: FilterContext,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._shape = shape
        self._chat = shape.is_chat
        self._id = shape.id_prefix + uuid.uuid4().hex[:24]
        self._created = int(clock())
        self._model = shape.model
        self._fctx = fctx
        self._filters = filters
        self._choices: dict[int, _Choice] = {}
        self._num_prompt_tokens = 0
        self._wants_logprobs = shape.wants_logprobs
        self.blocked = False
        self.filter_ns = 0
        """Time spent in the response filters so far (the ``response_filter`` stage)."""

    def _choice(self, index: int) -> _Choice:
        choice = self._choices.get(index)
        if choice is None:
            syntax = self._shape.tool_syntax
            calls = ToolCallParser(syntax, max_calls=self._shape.max_tool_calls) if syntax else None
            choice = self._choices[index] = _Choice(self._filters.stream(self._fctx), calls)
        return choice

    def _chunk(
        self,
        index: int,
        text: str | None,
        finish: str | None,
        logprobs: list[LogprobEntry] | None = None,
        tool_calls: list[ToolCallDelta] | None = None,
    ) -> StreamChunk:
        lp = logprobs if (self._wants_logprobs and logprobs) else None
        if self._chat:
            return ChatCompletionChunk(
                id=self._id,
                created=self._created,
                model=self._model,
                system_fingerprint=self._shape.system_fingerprint,
                choices=[
                    ChatChunkChoice(
                        index=index,
                        delta=ChunkDelta(content=text, tool_calls=tool_calls),
                        finish_reason=finish,
                        logprobs=chat_logprobs(lp) if lp else None,
                    )
                ],
            )
        return CompletionChunk(
            id=self._id,
            created=self._created,
            model=self._model,
            system_fingerprint=self._shape.system_fingerprint,
            choices=[
                CompletionChoice(
                    index=index,
                    text=text or "",
                    finish_reason=finish,
                    logprobs=completion_logprobs(lp) if lp else None,
                )
            ],
        )

    def start(self) -> list[StreamChunk]:
        if not self._chat:
            # An echoed prompt opens each choice, before any generated text.
            echo = self._shape.echo
            return [self._chunk(i, echo, None) for i in range(self._shape.num_choices)] if echo else []
        first = ChatCompletionChunk(
            id=self._id,
            created=self._created,
            model=self._model,
            system_fingerprint=self._shape.system_fingerprint,
            choices=[
                ChatChunkChoice(index=i, delta=ChunkDelta(role="assistant", content=""))
                for i in range(self._shape.num_choices)
            ],
        )
        return [first]

    def add(self, event: DeltaEvent) -> list[StreamChunk]:
        self._num_prompt_tokens = max(self._num_prompt_tokens, event.num_prompt_tokens)
        choice = self._choice(event.index)
        if choice.finished:
            return []
        choice.num_output_tokens = max(choice.num_output_tokens, event.num_output_tokens)
        choice.feed(event.text, event.logprobs)
        out: list[StreamChunk] = []
        started_ns = perf_counter_ns()
        step = choice.filter.feed(event.text)
        tail = choice.filter.finish() if event.finish_reason is not None and not step.blocked else None
        self.filter_ns += perf_counter_ns() - started_ns
        if step.blocked:
            return self._block(event.index, choice)
        released = step.release
        if tail is not None:
            if tail.blocked:
                return self._block(event.index, choice)
            released += tail.release
            choice.finished = True
        logprobs = choice.release(released)
        out += self._released(
            event.index, choice, released, logprobs, is_last=event.finish_reason is not None
        )
        if event.finish_reason is not None:
            out.append(
                self._chunk(
                    event.index, None if self._chat else "", _finish_reason(choice, event.finish_reason)
                )
            )
        return out

    def _released(
        self, index: int, choice: _Choice, text: str, logprobs: list[LogprobEntry], *, is_last: bool
    ) -> list[StreamChunk]:
        """The chunks for text the filter released: as is, or split into content and calls."""
        if choice.calls is None:
            return [self._chunk(index, text, None, logprobs)] if text or logprobs else []
        events = choice.calls.feed(text) + (choice.calls.finish() if is_last else [])
        out = []
        for e in events:
            if isinstance(e, Content):
                out.append(self._chunk(index, e.text, None, logprobs))
                logprobs = []
            elif isinstance(e, CallStart):
                head = ToolCallDelta(
                    index=e.index, id=e.id, type="function", function=FunctionDelta(name=e.name, arguments="")
                )
                out.append(self._chunk(index, None, None, tool_calls=[head]))
            elif isinstance(e, Arguments):
                piece = ToolCallDelta(index=e.index, function=FunctionDelta(arguments=e.text))
                out.append(self._chunk(index, None, None, tool_calls=[piece]))
        return out

    def _block(self, index: int, choice: _Choice) -> list[StreamChunk]:
        self.blocked = True
        choice.finished = True
        return [self._chunk(index, None if self._chat else "", "content_filter")]

    def finish(self) -> list[StreamChunk]:
        """Flush choices the engine ended without a finish reason (cut-off streams)."""
        out: list[StreamChunk] = []
        for index, choice in sorted(self._choices.items()):
            if choice.finished:
                continue
            started_ns = perf_counter_ns()
            tail = choice.filter.finish()
            self.filter_ns += perf_counter_ns() - started_ns
            if tail.blocked:
                out.extend(self._block(index, choice))
                continue
            choice.finished = True
            logprobs = choice.release(tail.release)
            out += self._released(index, choice, tail.release, logprobs, is_last=True)
        return out

    def texts(self) -> dict[int, str]:
        """What each choice has delivered to the client (after the response filters)."""
        return {i: "".join(c.released) for i, c in sorted(self._choices.items())}

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self._choices.values() for f in c.filter.findings]

    def usage(self) -> Usage:
        completion = sum(c.num_output_tokens for c in self._choices.values())
        return Usage(
            prompt_tokens=self._num_prompt_tokens,
            completion_tokens=completion,
            total_tokens=self._num_prompt_tokens + completion,
        )

    def usage_chunk(self) -> StreamChunk:
        kind = ChatCompletionChunk if self._chat else CompletionChunk
        return kind(
            id=self._id,
            created=self._created,
            model=self._model,
            system_fingerprint=self._shape.system_fingerprint,
            choices=[],
            usage=self.usage(),
        )

    def filter_error(self) -> StreamError:
        """How a stream the response filters stopped ends (its answer is whole and recorded)."""
        return StreamError(
            ContentPolicyError("The response was stopped by the content policy"), completes=True
        )


def _finish_reason(choice: _Choice, reason: str) -> str:
    """A choice that stopped after calling tools finished for ``tool_calls``, as OpenAI says."""
    return (
        "tool_calls" if reason == "stop" and choice.calls is not None and choice.calls.num_calls else reason
    )
