"""A streamed answer as server-sent events: ``data: {chunk}`` per chunk, then ``data: [DONE]``.

An error ends the stream as an OpenAI error event; ``[DONE]`` follows it only when the answer is
whole and on the record (a choice the response filters stopped), so a client that saw ``[DONE]``
got an answer that is on the record.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

import msgspec

from gateway.errors import error_body
from gateway.stream_events import StreamError, StreamEvent

__all__ = ["server_sent_events"]

_encoder = msgspec.json.Encoder()
_DONE = b"data: [DONE]\n\n"


def _sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


async def server_sent_events(events: AsyncGenerator[StreamEvent, None]) -> AsyncIterator[bytes]:
    # Closing this closes ``events``: its clean-up (engine abort, quota, audit) runs at once.
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, StreamError):
                err = event.error
                yield _sse(error_body(err.message, err.type, err.code, err.param))
                if event.completes:
                    yield _DONE
                return
            yield _sse(_encoder.encode(event))
    yield _DONE
