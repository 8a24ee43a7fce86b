"""Typed stream events as server-sent events: ``[DONE]`` only after an answer that is whole."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import msgspec
import pytest

from gateway.errors import AuditUnavailable, ContentPolicyError
from gateway.openai_types import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChunkDelta,
    CompletionChoice,
    CompletionChunk,
)
from gateway.sse import server_sent_events
from gateway.stream_events import StreamError, StreamEvent

pytestmark = pytest.mark.anyio

CHUNK = CompletionChunk(
    id="cmpl-1",
    created=1,
    model="m",
    system_fingerprint="fp_1",
    choices=[CompletionChoice(index=0, text="hi", finish_reason=None)],
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _events(*items: StreamEvent, closed: list[bool]) -> AsyncGenerator[StreamEvent, None]:
    try:
        for item in items:
            yield item
    finally:
        closed.append(True)


async def _sent(*items: StreamEvent) -> list[bytes]:
    return [event async for event in server_sent_events(_events(*items, closed=[]))]


async def test_chunks_then_done() -> None:
    sent = await _sent(CHUNK)
    assert json.loads(sent[0].removeprefix(b"data: "))["choices"][0]["text"] == "hi"
    assert sent[1:] == [b"data: [DONE]\n\n"]


async def test_a_broken_stream_ends_with_its_error_and_no_done() -> None:
    sent = await _sent(CHUNK, StreamError(AuditUnavailable("the audit log is unavailable")))
    assert json.loads(sent[-1].removeprefix(b"data: "))["error"]["code"] == "audit_unavailable"
    assert b"data: [DONE]\n\n" not in sent


async def test_a_stream_the_filters_stopped_ends_with_its_error_then_done() -> None:
    sent = await _sent(CHUNK, StreamError(ContentPolicyError("stopped"), completes=True))
    assert json.loads(sent[-2].removeprefix(b"data: "))["error"]["code"] == "content_policy_violation"
    assert sent[-1] == b"data: [DONE]\n\n"


async def test_closing_the_sse_stream_closes_the_events_at_once() -> None:
    closed: list[bool] = []
    sse = server_sent_events(_events(CHUNK, CHUNK, closed=closed))
    await anext(sse)
    await sse.aclose()  # the client left after the first event
    assert closed == [True]


def _chat(delta: ChunkDelta, finish_reason: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk(
        id="chatcmpl-1",
        created=1,
        model="m",
        system_fingerprint="fp_1",
        choices=[ChatChunkChoice(index=0, delta=delta, finish_reason=finish_reason)],
    )


OPENER = _chat(ChunkDelta(role="assistant", content=""))
TOKEN = _chat(ChunkDelta(content="hi"))
CLOSER = _chat(ChunkDelta(), finish_reason="stop")


def _one_per_chunk(*items: ChatCompletionChunk) -> list[bytes]:
    """What the stream was before chunks were held: one write per chunk, then ``[DONE]``."""
    return [b"data: " + msgspec.json.encode(item) + b"\n\n" for item in items] + [b"data: [DONE]\n\n"]


async def test_the_opener_goes_out_with_the_first_text_and_the_closer_with_done() -> None:
    sent = await _sent(OPENER, TOKEN, TOKEN, CLOSER)
    assert b"".join(sent) == b"".join(_one_per_chunk(OPENER, TOKEN, TOKEN, CLOSER))
    expected = _one_per_chunk(OPENER, TOKEN, TOKEN, CLOSER)
    assert sent == [expected[0] + expected[1], expected[2], expected[3] + expected[4]]


async def test_a_chunk_with_text_is_never_held() -> None:
    sent = await _sent(TOKEN, TOKEN)
    assert sent == _one_per_chunk(TOKEN, TOKEN)


async def test_a_held_chunk_goes_out_before_an_error() -> None:
    sent = await _sent(OPENER, StreamError(AuditUnavailable("the audit log is unavailable")))
    assert sent[0].startswith(_one_per_chunk(OPENER)[0])
    assert (
        json.loads(sent[0].split(b"\n\n")[1].removeprefix(b"data: "))["error"]["code"] == "audit_unavailable"
    )
    assert len(sent) == 1


async def test_a_completion_closer_is_held() -> None:
    closer = CompletionChunk(
        id="cmpl-1",
        created=1,
        model="m",
        system_fingerprint="fp_1",
        choices=[CompletionChoice(index=0, text="", finish_reason="length")],
    )
    sent = await _sent(CHUNK, closer)
    assert sent == [
        b"data: " + msgspec.json.encode(CHUNK) + b"\n\n",
        b"data: " + msgspec.json.encode(closer) + b"\n\ndata: [DONE]\n\n",
    ]
