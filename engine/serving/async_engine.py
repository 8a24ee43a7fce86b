"""The asyncio face of the engine, for the server: add a request, stream its deltas, abort it.

One background thread owns the ``LLMEngine`` and runs steps while there is work; the event loop
never does torch work. Requests are validated and tokenized on the caller's side (errors raise
before the first delta), then handed to the thread through a pending list under a lock that is
only held for list operations. A step holds a second lock, the step lock; abort takes it in a
worker thread, so the event loop never waits for a step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.core.outputs import ModelInfo, StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineError, EngineRankError, EngineUnavailableError, InvalidRequestError
from engine.llm_engine import LLMEngine
from engine.loading.model_source import ModelSource

__all__ = ["AsyncEngine"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    request_id: str
    model: str
    token_ids: list[int]
    params: SamplingParams
    tenant: str | None
    subject: str | None
    priority: int


_CLOSED = object()
"""Put on a stream when its request was aborted: the stream closes its open completions."""


class _Stream:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[object] = asyncio.Queue()

    def put(self, item: object) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class AsyncEngine:
    def __init__(
        self,
        config: EngineConfig,
        data_dir: str | Path = ".",
        sources: Mapping[str, ModelSource] | None = None,
        *,
        skip_failed_models: bool = False,
        on_fatal: Callable[[EngineRankError], None] | None = None,
    ) -> None:
        """``on_fatal`` is called (from the step thread) when a tensor-parallel rank fails: the
        engine has stopped and failed every open stream; the process should exit so that its
        supervisor starts a new instance."""
        self.config = config
        self._on_fatal = on_fatal
        self._data_dir = data_dir
        self._sources = sources
        self._skip_failed = skip_failed_models
        self._core: LLMEngine | None = None
        self._cond = threading.Condition()
        """Guards the pending list and the streams; held only briefly, also by the event loop."""
        self._step_lock = threading.Lock()
        """Held by a step and by abort: the scheduler and the block pool change under it only."""
        self._pending: list[_Pending] = []
        self._streams: dict[str, _Stream] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    async def start(self) -> None:
        """Load every model (in a worker thread) and start the step loop."""
        if self._core is not None:
            return
        self._core = await asyncio.to_thread(
            partial(LLMEngine, skip_failed_models=self._skip_failed),
            self.config,
            self._data_dir,
            self._sources,
        )
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

    def chat_prompt(self, model: str, messages: list[dict[str, Any]]) -> list[int]:
        """The chat template applied, as token ids: special tokens only where the template put them."""
        tokenizer = self.core.model(model).tokenizer
        if tokenizer.chat_template is None:
            raise InvalidRequestError(f"model {model} has no chat template", param="messages")
        return tokenizer.encode_chat(messages)

    def tokenize(self, model: str, text: str) -> list[int]:
        return self.core.model(model).tokenizer.encode(text)

    def count_tokens(self, model: str, prompt: str) -> int:
        """Prompt tokens of ``prompt`` exactly as ``generate`` will count them."""
        return len(self.core.prompt_token_ids(model, prompt))

    def stats(self) -> dict[str, int | float]:
        # Unlocked on purpose: counters may be one step stale, but the loop never waits for a step.
        return self.core.stats()

    async def generate(
        self,
        request_id: str,
        model: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        tenant: str | None = None,
        subject: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[StreamDelta]:
        """Deltas of all ``params.n`` completions as they come; the stream ends when all finished.
        Leaving the loop early (client gone) aborts the request."""
        if self._stopping or self._thread is None:
            raise EngineUnavailableError("engine is not running")
        token_ids = self.core.prompt_token_ids(model, prompt)
        stream = _Stream(asyncio.get_running_loop())
        with self._cond:
            if request_id in self._streams:
                raise InvalidRequestError(f"request id {request_id!r} is already running", param="request_id")
            self._streams[request_id] = stream
            self._pending.append(_Pending(request_id, model, token_ids, params, tenant, subject, priority))
            self._cond.notify_all()
        open_indices = set(range(params.n))
        try:
            while open_indices:
                item = await stream.queue.get()
                if item is _CLOSED:
                    for index in sorted(open_indices):
                        yield _abort_delta(index, len(token_ids))
                    open_indices.clear()
                    break
                if isinstance(item, EngineError):
                    raise item
                assert isinstance(item, StreamDelta)
                if item.finish_reason is not None:
                    open_indices.discard(item.index)
                yield item
        finally:
            if open_indices:
                await self.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Free the request's blocks now; its stream ends with finish_reason "abort"."""
        await asyncio.to_thread(self._abort, request_id)

    def _abort(self, request_id: str) -> None:
        # Stream first: a request the loop has taken but not yet admitted is then skipped by it.
        with self._cond:
            self._pending = [p for p in self._pending if p.request_id != request_id]
            stream = self._streams.pop(request_id, None)
        with self._step_lock:
            if self._core is not None:
                self._core.abort(request_id)
        if stream is not None:
            stream.put(_CLOSED)

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
            with self._cond:
                streams = [(self._streams.get(rid), delta) for rid, delta in deltas]
                for rid in done:
                    self._streams.pop(rid, None)
            for stream, delta in streams:
                if stream is not None:
                    stream.put(delta)

    def _admit(self, core: LLMEngine, pending: list[_Pending]) -> None:
        for p in pending:
            with self._cond:
                stream = self._streams.get(p.request_id)
            if stream is None:  # aborted while in flight to the engine
                continue
            try:
                core.add_tokenized(
                    p.request_id,
                    p.model,
                    p.token_ids,
                    p.params,
                    tenant=p.tenant,
                    subject=p.subject,
                    priority=p.priority,
                )
            except EngineError as exc:
                with self._cond:
                    self._streams.pop(p.request_id, None)
                stream.put(exc)

    def _fail_all(self, core: LLMEngine, exc: Exception, error: EngineError | None = None) -> None:
        """End every open stream with ``error`` (by default one naming only the type of ``exc``)."""
        error = error or EngineError(f"engine step failed: {type(exc).__name__}")
        with self._cond:
            streams, self._streams = self._streams, {}
        for request_id, stream in streams.items():
            core.abort(request_id)
            stream.put(error)


def _abort_delta(index: int, num_prompt_tokens: int) -> StreamDelta:
    return StreamDelta(
        index=index,
        text="",
        token_ids=[],
        finish_reason="abort",
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=0,
    )
