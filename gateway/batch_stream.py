"""A streamed batch of prompts: every prompt's stream at once, merged into one as OpenAI does.

Each prompt is its own request through the pipeline (``gateway.prompt_batch``): its own quota,
engine call, response filters and audit records. Their streams run side by side and their
chunks interleave as they come; prompt ``p``'s choice ``i`` goes out with index ``p * n + i``,
under the first prompt's id. The per-prompt usage chunks are held back and summed into one at
the end (``stream_options.include_usage``).

A prompt whose response the filters stop ends as a single stream does (its choices finish with
``content_filter``, its record says so); the other prompts' streams are independent requests and
run to their own end, and the merged stream then ends with the content-policy error (then
``[DONE]``: the answer is whole and on the record) instead of the usage chunk, as a single
stream does. A prompt whose stream breaks (engine failure, audit unavailable) does not stop the
others either; the merged stream ends with its error (no ``[DONE]``). Closing the merged stream
(the client left) closes every prompt's stream, whose clean-up aborts its engine request,
settles its quota and records it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import msgspec

from gateway.openai_types import CompletionChunk, CompletionRequest, Usage
from gateway.prepared import Prepared
from gateway.request_context import RequestContext
from gateway.shielded import close_lease, shielded
from gateway.stream_events import StreamError, StreamEvent

if TYPE_CHECKING:
    from gateway.inference import InferenceService

__all__ = ["close_unstarted", "merge_streams", "open_batch"]

_QUEUE_SIZE = 64
"""Chunks waiting for a slow client before the prompts' streams stop reading from the engine."""

_DONE = object()


async def open_batch(
    inference: InferenceService, ctx: RequestContext, parts: list[CompletionRequest]
) -> tuple[AsyncGenerator[StreamEvent, None], dict[str, str]]:
    """Prepare and open every prompt's stream, then merge them; refusals are raised before any
    chunk, as for one prompt (a refused prompt refuses the batch: what was prepared or opened
    for the others is released, and an opened stream's record says why it ended early)."""
    preps: list[Prepared] = []
    try:
        for p, part in enumerate(parts):
            prep = await inference.prepare(ctx, "completions", part)
            # The engine runs the prompts side by side: each needs an id of its own there (the
            # audit records keep the request's).
            prep.generate = msgspec.structs.replace(prep.generate, request_id=f"{ctx.request_id}-{p}")
            preps.append(prep)
    except BaseException:
        for prep in preps:
            await close_lease(prep.lease, 0)
        raise
    streams: list[AsyncGenerator[StreamEvent, None]] = []
    for i, prep in enumerate(preps):
        try:
            streams.append(await inference.open_stream(prep))
        except BaseException:  # open_stream released its own lease
            for opened, stream in zip(preps, streams, strict=False):
                opened.early_end = "batch refused: another prompt was refused"
                await shielded(close_unstarted(stream))
            for rest in preps[i + 1 :]:
                await close_lease(rest.lease, 0)
            raise
    first = parts[0]
    merged = merge_streams(streams, first.num_choices, include_usage=first.include_usage)
    return merged, preps[-1].headers


async def merge_streams(
    streams: list[AsyncGenerator[StreamEvent, None]], num_choices: int, *, include_usage: bool
) -> AsyncGenerator[StreamEvent, None]:
    """One stream of ``streams`` (prompt ``p``'s at ``streams[p]``) with OpenAI's batch indices."""
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue(_QUEUE_SIZE)
    tasks = [asyncio.ensure_future(_pump(p, s, queue)) for p, s in enumerate(streams)]
    first_id: tuple[str, int] | None = None
    usage = Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
    usage_chunk: CompletionChunk | None = None
    broken: StreamError | None = None
    stopped: StreamError | None = None
    try:
        num_open = len(tasks)
        while num_open:
            p, event = await queue.get()
            if event is _DONE:
                num_open -= 1
                continue
            if isinstance(event, StreamError):
                if event.completes:
                    stopped = stopped or event
                else:
                    broken = broken or event
                continue
            if not isinstance(event, CompletionChunk):
                raise TypeError(f"a batch streams completions, not {type(event).__name__}")
            if first_id is None:
                first_id = (event.id, event.created)
            if isinstance(event.usage, Usage) and not event.choices:
                usage = _summed(usage, event.usage)
                usage_chunk = event
                continue
            choices = [msgspec.structs.replace(c, index=p * num_choices + c.index) for c in event.choices]
            yield msgspec.structs.replace(event, id=first_id[0], created=first_id[1], choices=choices)
        if broken is not None:
            yield broken
        elif stopped is not None:
            yield stopped
        elif include_usage and usage_chunk is not None and first_id is not None:
            yield msgspec.structs.replace(usage_chunk, id=first_id[0], created=first_id[1], usage=usage)
    finally:
        # The client left, or all is done: each prompt's stream closes (its own shielded clean-up
        # aborts the engine request, settles the quota and writes the record).
        for task in tasks:
            task.cancel()
        await shielded(asyncio.gather(*tasks, return_exceptions=True))


async def _pump(
    p: int, stream: AsyncGenerator[StreamEvent, None], queue: asyncio.Queue[tuple[int, Any]]
) -> None:
    async with contextlib.aclosing(stream):
        async for event in stream:
            await queue.put((p, event))
    await queue.put((p, _DONE))


async def close_unstarted(stream: AsyncGenerator[StreamEvent, None]) -> None:
    """Close a stream that ``open_stream`` returned but nobody read: its engine call is open and
    its start recorded, and only running it reaches its clean-up (abort, quota, record)."""
    with contextlib.suppress(Exception):
        await anext(stream, None)
    await stream.aclose()


def _summed(a: Usage, b: Usage) -> Usage:
    prompt = a.prompt_tokens + b.prompt_tokens
    completion = a.completion_tokens + b.completion_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
