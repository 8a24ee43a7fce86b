"""A streamed answer as server-sent events: ``data: {chunk}`` per chunk, then ``data: [DONE]``.

An error ends the stream as an OpenAI error event; ``[DONE]`` follows it only when the answer is
whole and on the record (a choice the response filters stopped), so a client that saw ``[DONE]``
got an answer that is on the record.

Each item yielded here is one write to the client's socket, and a write costs the gateway more
CPU than encoding a chunk. A chunk that carries nothing a client waits for (the chat opener with
only ``role``, a closer with only ``finish_reason``, the usage chunk) is therefore held and
written with the next item, so a short stream is not mostly lone writes. The bytes on the wire
are the same; only how they are split into writes changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

import msgspec

from gateway.errors import error_body
from gateway.openai_types import ChatCompletionChunk
from gateway.stream_events import StreamChunk, StreamError, StreamEvent

__all__ = ["DONE", "server_sent_events"]

_encoder = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"
"""The end of a stream whose answer is whole and on the record: always the last bytes sent."""


def _sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def _is_bare(chunk: StreamChunk) -> bool:
    """Whether no choice of ``chunk`` carries text, tool calls or logprobs."""
    if isinstance(chunk, ChatCompletionChunk):
        return all(
            not c.delta.content and not c.delta.tool_calls and c.logprobs is None for c in chunk.choices
        )
    return all(not c.text and c.logprobs is None for c in chunk.choices)


async def server_sent_events(events: AsyncGenerator[StreamEvent, None]) -> AsyncGenerator[bytes, None]:
    held = b""
    # Closing this closes ``events``: its clean-up (engine abort, quota, audit) runs at once.
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, StreamError):
                err = event.error
                yield held + _sse(error_body(err.message, err.type, err.code, err.param))
                if event.completes:
                    yield DONE
                return
            data = _sse(_encoder.encode(event))
            if _is_bare(event):
                held += data
                continue
            yield held + data
            held = b""
    yield held + DONE
