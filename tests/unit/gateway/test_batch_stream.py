"""A streamed batch: the prompts' streams merged with OpenAI's indices, one id, summed usage, and
every prompt's stream closed when the merged one is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from gateway.batch_stream import merge_streams
from gateway.errors import ContentPolicyError, GatewayError
from gateway.openai_types import CompletionChoice, CompletionChunk, Usage
from gateway.stream_events import StreamError, StreamEvent


def _chunk(id_: str, index: int, text: str, finish: str | None = None) -> CompletionChunk:
    choice = CompletionChoice(index=index, text=text, finish_reason=finish)
    return CompletionChunk(id=id_, created=1, model="m", choices=[choice], system_fingerprint="fp_x")


def _usage(id_: str, prompt: int, completion: int) -> CompletionChunk:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    return CompletionChunk(id=id_, created=1, model="m", choices=[], system_fingerprint="fp_x", usage=usage)


async def _stream(
    events: list[StreamEvent], closed: list[str], name: str, gate: asyncio.Event | None = None
) -> AsyncGenerator[StreamEvent, None]:
    try:
        for event in events:
            yield event
            if gate is not None:
                await gate.wait()
    finally:
        closed.append(name)


async def _all(stream: AsyncGenerator[StreamEvent, None]) -> list[StreamEvent]:
    return [event async for event in stream]


def test_choices_are_reindexed_under_one_id_and_usage_is_summed() -> None:
    closed: list[str] = []
    a = _stream([_chunk("a", 0, "x"), _chunk("a", 1, "y", "length"), _usage("a", 3, 2)], closed, "a")
    b = _stream([_chunk("b", 0, "z"), _chunk("b", 1, "w", "stop"), _usage("b", 4, 5)], closed, "b")
    out = asyncio.run(_all(merge_streams([a, b], 2, include_usage=True)))
    chunks = [e for e in out if isinstance(e, CompletionChunk)]
    assert len(chunks) == len(out) == 5
    assert {c.id for c in chunks} == {"a"}  # the first chunk's id, whichever prompt sent it
    texts = {c.choices[0].index: c.choices[0].text for c in chunks[:-1]}
    assert texts == {0: "x", 1: "y", 2: "z", 3: "w"}
    assert chunks[-1].choices == []
    assert chunks[-1].usage == Usage(prompt_tokens=7, completion_tokens=7, total_tokens=14)
    assert sorted(closed) == ["a", "b"]


def test_without_include_usage_no_usage_chunk_goes_out() -> None:
    a = _stream([_chunk("a", 0, "x", "stop")], [], "a")
    b = _stream([_chunk("b", 0, "z", "stop")], [], "b")
    out = asyncio.run(_all(merge_streams([a, b], 1, include_usage=False)))
    assert sorted(e.choices[0].index for e in out if isinstance(e, CompletionChunk)) == [0, 1]
    assert len(out) == 2


def test_a_blocked_prompt_ends_its_choice_the_others_finish_and_the_stream_ends_with_the_policy_error() -> (
    None
):
    stopped = StreamError(
        ContentPolicyError("The response was stopped by the content policy"), completes=True
    )
    a = _stream([_chunk("a", 0, "x"), _chunk("a", 0, "", "content_filter"), stopped], [], "a")
    b = _stream([_chunk("b", 0, "z"), _chunk("b", 0, "w", "stop"), _usage("b", 4, 5)], [], "b")
    out = asyncio.run(_all(merge_streams([a, b], 1, include_usage=True)))
    finished = {
        e.choices[0].index: e.choices[0].finish_reason
        for e in out
        if isinstance(e, CompletionChunk) and e.choices and e.choices[0].finish_reason
    }
    assert finished == {0: "content_filter", 1: "stop"}
    assert out[-1] is stopped  # instead of the usage chunk, as one blocked stream ends
    assert not any(isinstance(e, CompletionChunk) and not e.choices for e in out)


def test_a_broken_prompt_stream_wins_over_a_blocked_one_at_the_end() -> None:
    stopped = StreamError(ContentPolicyError("stopped"), completes=True)
    broken = StreamError(GatewayError("engine failed"))
    a = _stream([_chunk("a", 0, "x"), stopped], [], "a")
    b = _stream([_chunk("b", 0, "z"), broken], [], "b")
    out = asyncio.run(_all(merge_streams([a, b], 1, include_usage=True)))
    assert out[-1] is broken and sum(isinstance(e, StreamError) for e in out) == 1


def test_closing_the_merged_stream_closes_every_prompts_stream() -> None:
    async def run() -> list[str]:
        closed: list[str] = []
        gate = asyncio.Event()  # never set: each prompt's stream waits after its first chunk
        streams = [_stream([_chunk(n, 0, n), _chunk(n, 0, "more")], closed, n, gate) for n in "abc"]
        merged = merge_streams(streams, 1, include_usage=False)
        first = await anext(merged)
        assert isinstance(first, CompletionChunk)
        await merged.aclose()  # what the SSE writer does when the client leaves
        return closed

    assert sorted(asyncio.run(run())) == ["a", "b", "c"]


def test_cancelling_the_merged_stream_closes_every_prompts_stream() -> None:
    async def run() -> list[str]:
        closed: list[str] = []
        gate = asyncio.Event()
        streams = [_stream([_chunk(n, 0, n)], closed, n, gate) for n in "ab"]
        merged = merge_streams(streams, 1, include_usage=False)

        async def read() -> None:
            async for _ in merged:
                pass

        task = asyncio.ensure_future(read())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return closed

    assert sorted(asyncio.run(run())) == ["a", "b"]
