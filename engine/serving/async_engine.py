"""The asyncio face of the engine, for the server: add a request, stream its deltas, abort it.

One background thread owns the ``LLMEngine`` and runs steps while there is work; the event loop
never does torch work. Requests are validated and tokenized on the caller's side (errors raise
before the first delta), then handed to the thread through a pending list under a lock that is
only held for list operations. A step holds a second lock, the step lock; abort takes it in a
worker thread, so the event loop never waits for a step.

A step's output reaches the event loop in one hand-over (one ``call_soon_threadsafe``, not one per
token); each stream then yields everything it received since its reader last asked, one delta per
completion index. Stats are a snapshot the step thread publishes, so ``stats`` (the engine's info
answer) never waits for a step nor reads the scheduler while a step changes it.

Embedding requests take the same way and resolve once, with all their vectors (the engine runs
them in bounded batches between steps).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import msgspec

from engine.config import EngineConfig
from engine.core.outputs import EmbeddingOutput, ModelInfo, StreamDelta
from engine.errors import EngineError, EngineRankError, EngineUnavailableError, InvalidRequestError
from engine.llm_engine import LLMEngine
from engine.loading.model_source import ModelSource
from engine.loading.source_opener import SourceOpener
from engine.serving.frames import coalesced
from engine.serving.inbox import Inbox
from engine.serving.protocol import EmbedRequest, GenerateRequest, KeyOperationEvent

__all__ = ["AsyncEngine"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    request: GenerateRequest
    token_ids: list[int]


@dataclass(slots=True)
class _PendingEmbedding:
    request: EmbedRequest
    inputs: list[list[int]]


_INLINE_EMBED_CHARS = 8_192
"""Embedding inputs up to this many characters in all are tokenized on the loop; more in a thread."""

_CLOSED = object()
"""Put on a stream when its request was aborted: the stream closes its open completions."""


class _Stream(Inbox[object]):
    """One request's inbox: per step a list of deltas; or an EngineError, or _CLOSED."""

    __slots__ = ("loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop


def _put_all(batch: list[tuple[_Stream, object]]) -> None:
    """On the event loop: one call per step hands every stream its share."""
    for stream, item in batch:
        stream.put(item)


_STATS_EVERY_S = 0.05
"""How stale the stats snapshot may get while decode steps run and no request comes or goes."""


class AsyncEngine:
    def __init__(
        self,
        config: EngineConfig,
        data_dir: str | Path = ".",
        sources: Mapping[str, ModelSource] | None = None,
        *,
        skip_failed_models: bool = False,
        on_fatal: Callable[[EngineRankError], None] | None = None,
        source_opener: SourceOpener | None = None,
    ) -> None:
        """``on_fatal`` is called (from the step thread) when a tensor-parallel rank fails: the
        engine has stopped and failed every open stream; the process should exit so that its
        supervisor starts a new instance. ``source_opener``: see ``LLMEngine``."""
        self.config = config
        self._on_fatal = on_fatal
        self._data_dir = data_dir
        self._sources = sources
        self._skip_failed = skip_failed_models
        self._source_opener = source_opener
        self._core: LLMEngine | None = None
        self._cond = threading.Condition()
        """Guards the pending list and the streams; held only briefly, also by the event loop."""
        self._step_lock = threading.Lock()
        """Held by a step and by abort: the scheduler and the block pool change under it only."""
        self._pending: list[_Pending | _PendingEmbedding] = []
        self._streams: dict[str, _Stream] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stats: dict[str, int | float] = {}
        self._stats_at = 0.0

    async def start(self) -> None:
        """Load every model (in a worker thread) and start the step loop."""
        if self._core is not None:
            return
        self._core = await asyncio.to_thread(
            partial(LLMEngine, skip_failed_models=self._skip_failed, source_opener=self._source_opener),
            self.config,
            self._data_dir,
            self._sources,
        )
        self._publish_stats(self._core)
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="strongroom-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        """Stop the loop; every open stream ends with finish_reason "abort"."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        for request_id in list(self._streams):
            await asyncio.to_thread(self._abort, request_id)
        if self._core is not None:
            self._core.close()  # stops the other tensor-parallel ranks

    @property
    def failed_models(self) -> dict[str, str]:
        """Models left out of service at start-up (skip_failed_models), with the reason."""
        return dict(self._core.failed_models) if self._core is not None else {}

    @property
    def rank_key_operations(self) -> list[KeyOperationEvent]:
        ranks = self._core.ranks if self._core is not None else None
        if ranks is None:
            return []
        return [msgspec.convert(op, KeyOperationEvent) for op in ranks.key_operations]

    @property
    def core(self) -> LLMEngine:
        if self._core is None:
            raise EngineUnavailableError("engine is not started")
        return self._core

    def model_infos(self) -> list[ModelInfo]:
        return [m.info() for m in self.core.models.values()]

    def render_chat(self, model: str, messages: list[dict[str, Any]]) -> str:
        template = self.core.model(model).tokenizer.chat_template
        if template is None:
            raise InvalidRequestError(f"model {model} has no chat template", param="messages")
        return template.render(messages, add_generation_prompt=True)

    def chat_prompt(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The chat template applied, as token ids: special tokens only where the template put them."""
        tokenizer = self.core.model(model).tokenizer
        if tokenizer.chat_template is None:
            raise InvalidRequestError(f"model {model} has no chat template", param="messages")
        return tokenizer.encode_chat(messages, tools=tools)

    def tokenize(self, model: str, text: str) -> list[int]:
        return self.core.model(model).tokenizer.encode(text)

    def prompt_token_ids(self, request: GenerateRequest) -> list[int]:
        """The request's prompt as validated token ids, whichever form it came in."""
        prompt: str | list[int]
        if request.messages is not None:
            # Whole messages (tool calls and call ids too) and the tools: the template renders both.
            messages = [msgspec.to_builtins(m) for m in request.messages]
            prompt = self.chat_prompt(request.model, messages, request.tools)
        elif request.prompt_token_ids is not None:
            prompt = request.prompt_token_ids
        elif request.prompt is not None:
            prompt = request.prompt
        else:
            raise InvalidRequestError(
                "one of prompt, prompt_token_ids or messages is required", param="prompt"
            )
        return self.core.prompt_token_ids(request.model, prompt)

    def count_tokens(self, request: GenerateRequest) -> int:
        """Prompt tokens of ``request`` exactly as ``generate`` will count them."""
        return len(self.prompt_token_ids(request))

    def stats(self) -> dict[str, int | float]:
        """The snapshot the step thread published last: taken whenever requests came or went, else
        at most ``_STATS_EVERY_S`` old."""
        if self._core is None:
            raise EngineUnavailableError("engine is not started")
        return self._stats

    async def generate(self, request: GenerateRequest) -> AsyncIterator[list[StreamDelta]]:
        """Deltas of all ``params.n`` completions, one list per step the reader saw; the stream ends
        when all finished. Leaving the loop early (client gone) aborts the request."""
        if self._stopping or self._thread is None:
            raise EngineUnavailableError("engine is not running")
        request_id = request.request_id
        token_ids = self.prompt_token_ids(request)
        stream = _Stream(asyncio.get_running_loop())
        with self._cond:
            if request_id in self._streams:
                raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
            self._streams[request_id] = stream
            self._pending.append(_Pending(request, token_ids))
            self._cond.notify_all()
        open_indices = set(range(request.params.n))
        try:
            while open_indices:
                deltas: list[StreamDelta] = []
                failure: EngineError | None = None
                for item in await stream.take():
                    if item is _CLOSED:
                        deltas += [_abort_delta(i, len(token_ids)) for i in sorted(open_indices)]
                        break
                    if isinstance(item, EngineError):
                        failure = item
                        break
                    deltas += cast(list[StreamDelta], item)
                for delta in deltas:
                    if delta.finish_reason is not None:
                        open_indices.discard(delta.index)
                if deltas:
                    yield coalesced(deltas)
                if failure is not None:
                    raise failure
        finally:
            if open_indices:
                await self.abort(request_id)

    def embedding_token_ids(self, request: EmbedRequest) -> list[list[int]]:
        """Each input as validated token ids."""
        return [self.core.embedding_token_ids(request.model, x) for x in request.inputs]

    def count_embedding_tokens(self, request: EmbedRequest) -> int:
        """The tokens ``embed`` will take (and charge) for ``request``."""
        return sum(len(ids) for ids in self.embedding_token_ids(request))

    async def embed(self, request: EmbedRequest) -> EmbeddingOutput:
        """One vector per input once all are computed; cancelling the call aborts the request."""
        if self._stopping or self._thread is None:
            raise EngineUnavailableError("engine is not running")
        request_id = request.request_id
        long = sum(len(x) for x in request.inputs if isinstance(x, str)) > _INLINE_EMBED_CHARS
        if long:
            token_ids = await asyncio.to_thread(self.embedding_token_ids, request)
        else:
            token_ids = self.embedding_token_ids(request)
        if not token_ids:
            raise InvalidRequestError("input must not be empty", param="input")
        stream = _Stream(asyncio.get_running_loop())
        with self._cond:
            if request_id in self._streams:
                raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
            self._streams[request_id] = stream
            self._pending.append(_PendingEmbedding(request, token_ids))
            self._cond.notify_all()
        done = False
        try:
            item = (await stream.take())[0]
            done = True
        finally:
            if not done:
                await self.abort(request_id)
        if isinstance(item, EngineError):
            raise item
        if item is _CLOSED:
            raise EngineUnavailableError("the embedding request was aborted")
        vectors = cast(list[list[float]], item)
        return EmbeddingOutput(embeddings=vectors, num_prompt_tokens=sum(len(ids) for ids in token_ids))

    async def abort(self, request_id: str) -> None:
        """Free the request's blocks now; its stream ends with finish_reason "abort"."""
        await asyncio.to_thread(self._abort, request_id)

    def _abort(self, request_id: str) -> None:
        # Stream first: a request the loop has taken but not yet admitted is then skipped by it.
        with self._cond:
            self._pending = [p for p in self._pending if p.request.request_id != request_id]
            stream = self._streams.pop(request_id, None)
        with self._step_lock:
            if self._core is not None:
                self._core.abort(request_id)
                self._publish_stats(self._core)
        if stream is not None:
            stream.loop.call_soon_threadsafe(stream.put, _CLOSED)

    def _publish_stats(self, core: LLMEngine) -> None:
        """Under the step lock (or before the loop runs)."""
        self._stats = core.stats()
        self._stats_at = time.monotonic()

    def _loop(self) -> None:
        core = self.core
        while True:
            with self._cond:
                while not self._stopping and not self._pending and not core.has_work:
                    self._cond.wait()
                if self._stopping:
                    return
                pending, self._pending = self._pending, []
            with self._step_lock:
                self._admit(core, pending)
                try:
                    deltas = core.step()
                except EngineRankError as exc:  # the instance cannot go on
                    log.critical("engine stopped: %s", exc)
                    with self._cond:
                        self._stopping = True
                    self._fail_all(core, exc, exc)
                    if self._on_fatal is not None:
                        self._on_fatal(exc)
                    return
                except Exception as exc:  # a failed step must not kill the engine: fail its requests
                    log.exception("engine step failed")
                    self._fail_all(core, exc)
                    continue
                done = {rid for rid, d in deltas if d.finish_reason is not None and not core.has_request(rid)}
                embedded = [(job.request_id, job.vectors) for job in core.take_embeddings()]
                # Fresh whenever requests come or go; otherwise at most _STATS_EVERY_S old.
                if pending or done or time.monotonic() - self._stats_at >= _STATS_EVERY_S:
                    self._publish_stats(core)
            self._hand_over(deltas, done, embedded)

    def _hand_over(
        self,
        deltas: list[tuple[str, StreamDelta]],
        done: set[str],
        embedded: list[tuple[str, list[list[float]]]],
    ) -> None:
        """Give each stream its deltas of this step (each finished embedding request its vectors),
        in one call per event loop."""
        by_request: dict[str, list[StreamDelta]] = {}
        for rid, delta in deltas:
            by_request.setdefault(rid, []).append(delta)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, object]]] = {}
        with self._cond:
            for rid, own in by_request.items():
                stream = self._streams.get(rid)
                if stream is not None:
                    by_loop.setdefault(stream.loop, []).append((stream, own))
            for rid in done:
                self._streams.pop(rid, None)
            for rid, vectors in embedded:
                finished = self._streams.pop(rid, None)
                if finished is not None:
                    by_loop.setdefault(finished.loop, []).append((finished, vectors))
        for loop, batch in by_loop.items():
            loop.call_soon_threadsafe(_put_all, batch)

    def _admit(self, core: LLMEngine, pending: list[_Pending | _PendingEmbedding]) -> None:
        for p in pending:
            request = p.request
            with self._cond:
                stream = self._streams.get(request.request_id)
            if stream is None:  # aborted while in flight to the engine
                continue
            try:
                if isinstance(p, _PendingEmbedding):
                    embed = p.request
                    core.add_embedding(embed.request_id, embed.model, p.inputs, dimensions=embed.dimensions)
                    continue
                assert isinstance(request, GenerateRequest)
                core.add_tokenized(
                    request.request_id,
                    request.model,
                    p.token_ids,
                    request.params,
                    tenant=request.tenant,
                    subject=request.subject,
                    priority=request.priority,
                )
            except EngineError as exc:
                with self._cond:
                    self._streams.pop(request.request_id, None)
                stream.loop.call_soon_threadsafe(stream.put, exc)

    def _fail_all(self, core: LLMEngine, exc: Exception, error: EngineError | None = None) -> None:
        """End every open stream with ``error`` (by default one naming only the type of ``exc``)."""
        error = error or EngineError(f"engine step failed: {type(exc).__name__}")
        with self._cond:
            streams, self._streams = self._streams, {}
        for request_id, stream in streams.items():
            core.abort(request_id)
            stream.loop.call_soon_threadsafe(stream.put, error)
        self._publish_stats(core)


def _abort_delta(index: int, num_prompt_tokens: int) -> StreamDelta:
    return StreamDelta(
        index=index,
        text="",
        token_ids=[],
        finish_reason="abort",
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=0,
    )
