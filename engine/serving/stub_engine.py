"""A model-free engine that answers at once: the fixed point for measuring gateway overhead.

It is an ``EngineBackend``, so the engine server, the gateway and the benchmarks run unchanged on
top of it. Like the real engine it runs steps: each step gives every running request one token
(a fixed word) and hands each stream its delta, and a stream yields everything it received since
its reader last asked as one list, one delta per completion index, so the wire carries the same
frames as behind ``AsyncEngine``. Its embeddings are one fixed unit vector per input. It does no
math; ``token_delay_s`` is the time between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from engine.core.outputs import EmbeddingOutput, ModelInfo, StreamDelta
from engine.errors import InvalidRequestError, PromptTooLongError, UnknownModelError
from engine.serving.frames import coalesced
from engine.serving.inbox import Inbox
from engine.serving.protocol import EmbedRequest, GenerateRequest, KeyOperationEvent

__all__ = ["StubEngine"]

_WORD = " hello"
_EMBED_SIZE = 8


class _Running:
    """One request between steps: its output so far and what its reader has not taken yet."""

    __slots__ = ("inbox", "max_tokens", "n", "num_output_tokens", "num_prompt_tokens")

    def __init__(self, num_prompt_tokens: int, max_tokens: int, n: int) -> None:
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.n = n
        self.num_output_tokens = 0
        self.inbox: Inbox[StreamDelta] = Inbox()

    def step(self) -> list[StreamDelta]:
        self.num_output_tokens += 1
        last = self.num_output_tokens == self.max_tokens
        return [self._delta(i, _WORD, [1], "length" if last else None) for i in range(self.n)]

    def aborted(self) -> list[StreamDelta]:
        return [self._delta(i, "", [], "abort") for i in range(self.n)]

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.max_tokens

    def _delta(self, index: int, text: str, token_ids: list[int], finish: str | None) -> StreamDelta:
        return StreamDelta(
            index=index,
            text=text,
            token_ids=token_ids,
            finish_reason=finish,
            num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=self.num_output_tokens,
        )


class StubEngine:
    """Gives every request ``max_tokens`` copies of one word, one per step, ``token_delay_s`` apart."""

    def __init__(
        self,
        models: tuple[str, ...] = ("demo-chat", "demo-base"),
        token_delay_s: float = 0.0,
        embedding_models: tuple[str, ...] = (),
        quantization: str | None = None,
        kv_cache_dtype: str = "",
    ):
        """``quantization`` and ``kv_cache_dtype``: what the chat models report they serve as."""
        self._models = {
            m: ModelInfo(
                name=m,
                max_model_len=4096,
                vocab_size=1,
                has_chat_template=True,
                dtype="none",
                quantization=quantization,
                kv_cache_dtype=kv_cache_dtype,
            )
            for m in models
        }
        self._models.update(
            (
                m,
                ModelInfo(
                    name=m,
                    max_model_len=4096,
                    vocab_size=1,
                    has_chat_template=False,
                    dtype="none",
                    kind="embedding",
                    embedding_size=_EMBED_SIZE,
                ),
            )
            for m in embedding_models
        )
        self._delay = token_delay_s
        self._running: dict[str, _Running] = {}
        self._stepper: asyncio.Task[None] | None = None
        self.num_requests = 0
        self.num_aborted = 0

    @property
    def active(self) -> set[str]:
        """Requests running now."""
        return set(self._running)

    @property
    def failed_models(self) -> dict[str, str]:
        return {}

    @property
    def rank_key_operations(self) -> list[KeyOperationEvent]:
        return []

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        for request_id in list(self._running):
            await self.abort(request_id)
        if self._stepper is not None:
            self._stepper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stepper

    def model_infos(self) -> list[ModelInfo]:
        return list(self._models.values())

    def count_tokens(self, request: GenerateRequest) -> int:
        self._check(request.model)
        if request.prompt_token_ids is not None:
            return len(request.prompt_token_ids)
        if request.messages is not None:
            text = "".join(f"<{m.role}>{m.content}" for m in request.messages) + "<assistant>"
        elif request.prompt is not None:
            text = request.prompt
        else:
            raise InvalidRequestError(
                "one of prompt, prompt_token_ids or messages is required", param="prompt"
            )
        return max(1, len(text) // 4)

    def _check(self, model: str) -> ModelInfo:
        info = self._models.get(model)
        if info is None:
            raise UnknownModelError(f"model {model!r} is not hosted by this engine", param="model")
        return info

    async def generate(self, request: GenerateRequest) -> AsyncIterator[list[StreamDelta]]:
        info = self._check(request.model)
        num_prompt = self.count_tokens(request)
        params = request.params
        if num_prompt + params.max_tokens > info.max_model_len:
            raise PromptTooLongError(
                f"prompt ({num_prompt} tokens) plus max_tokens exceeds {info.max_model_len}", param="messages"
            )
        if request.request_id in self._running:
            raise InvalidRequestError(
                f"request id {request.request_id!r} is already running", param="request_id"
            )
        running = self._running[request.request_id] = _Running(num_prompt, params.max_tokens, params.n)
        self.num_requests += 1
        if self._stepper is None or self._stepper.done():
            self._stepper = asyncio.create_task(self._steps(), name="stub-engine-steps")
        try:
            while True:
                deltas = await running.inbox.take()
                yield coalesced(deltas)
                if any(d.finish_reason is not None for d in deltas):
                    return
        finally:
            if self._running.get(request.request_id) is running:  # not a later request of the same id
                del self._running[request.request_id]
                if not running.is_finished:  # the reader left early: that aborts the request
                    self.num_aborted += 1

    async def _steps(self) -> None:
        """Like the engine's step loop: one token for every running request per step."""
        while self._running:
            await asyncio.sleep(self._delay)
            for request_id, running in list(self._running.items()):
                if running.is_finished:
                    continue
                running.inbox.put_all(running.step())
                if running.is_finished:
                    del self._running[request_id]

    def count_embedding_tokens(self, request: EmbedRequest) -> int:
        self._check_embedding(request.model)
        return sum(len(x) if isinstance(x, list) else max(1, len(x) // 4) for x in request.inputs)

    async def embed(self, request: EmbedRequest) -> EmbeddingOutput:
        info = self._check_embedding(request.model)
        size = request.dimensions or info.embedding_size
        if not 1 <= size <= info.embedding_size:
            raise InvalidRequestError(
                f"dimensions must be between 1 and {info.embedding_size}", param="dimensions"
            )
        self.num_requests += 1
        vector = [1.0] + [0.0] * (size - 1)
        return EmbeddingOutput(
            embeddings=[list(vector) for _ in request.inputs],
            num_prompt_tokens=self.count_embedding_tokens(request),
        )

    def _check_embedding(self, model: str) -> ModelInfo:
        info = self._check(model)
        if info.kind != "embedding":
            raise InvalidRequestError(f"model {model!r} is not an embedding model", param="model")
        return info

    async def abort(self, request_id: str) -> None:
        running = self._running.pop(request_id, None)
        if running is not None and not running.is_finished:
            self.num_aborted += 1
            running.inbox.put_all(running.aborted())

    def stats(self) -> dict[str, int | float]:
        return {"requests": self.num_requests, "running": len(self._running)}
