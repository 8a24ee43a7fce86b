"""Typed stream events as server-sent events: ``[DONE]`` only after an answer that is whole."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import pytest

from gateway.errors import AuditUnavailable, ContentPolicyError
from gateway.openai_types import CompletionChoice, CompletionChunk
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
