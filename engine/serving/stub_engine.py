"""A model-free engine that answers instantly: the fixed point for measuring gateway overhead.

It speaks the full ``EngineBackend`` interface, so the engine server, the gateway and the
benchmarks run unchanged on top of it. Its text is a fixed word repeated; it does no math.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from engine.core.sampling_params import SamplingParams
from engine.errors import PromptTooLongError, UnknownModelError

_WORD = " hello"


class StubModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    max_model_len: int = 4096
    has_chat_template: bool = True
    dtype: str = "none"
    tool_syntax: str = ""


class StubDelta(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    logprobs: None = None


class StubEngine:
    """Yields ``max_tokens`` copies of one word per request, optionally ``token_delay_s`` apart."""

    def __init__(self, models: tuple[str, ...] = ("demo-chat", "demo-base"), token_delay_s: float = 0.0):
        self._models = {m: StubModelInfo(name=m) for m in models}
        self._delay = token_delay_s
        self._aborted: set[str] = set()
        self.active: set[str] = set()
        self.num_requests = 0
        self.num_aborted = 0

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def model_infos(self) -> list[StubModelInfo]:
        return list(self._models.values())

    def chat_prompt(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        self._check(model)
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def count_tokens(self, model: str, prompt: str) -> int:
        self._check(model)
        return max(1, len(prompt) // 4)

    def _check(self, model: str) -> StubModelInfo:
        info = self._models.get(model)
        if info is None:
            raise UnknownModelError(f"model {model!r} is not hosted by this engine", param="model")
        return info

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
    ) -> AsyncIterator[StubDelta]:
        info = self._check(model)
        num_prompt = len(prompt) if isinstance(prompt, list) else self.count_tokens(model, prompt)
        if num_prompt + params.max_tokens > info.max_model_len:
            raise PromptTooLongError(
                f"prompt ({num_prompt} tokens) plus max_tokens exceeds {info.max_model_len}", param="messages"
            )
        self.num_requests += 1
        self.active.add(request_id)
        try:
            for i in range(params.max_tokens):
                if request_id in self._aborted:
                    yield StubDelta(
                        index=0,
                        text="",
                        token_ids=[],
                        finish_reason="abort",
                        num_prompt_tokens=num_prompt,
                        num_output_tokens=i,
                    )
                    return
                if self._delay:
                    await asyncio.sleep(self._delay)
                last = i == params.max_tokens - 1
                yield StubDelta(
                    index=0,
                    text=_WORD,
                    token_ids=[1],
                    finish_reason="length" if last else None,
                    num_prompt_tokens=num_prompt,
                    num_output_tokens=i + 1,
                )
        finally:
            self.active.discard(request_id)
            self._aborted.discard(request_id)

    async def abort(self, request_id: str) -> None:
        if request_id in self.active:
            self.num_aborted += 1
            self._aborted.add(request_id)

    def stats(self) -> dict[str, Any]:
        return {"requests": self.num_requests, "running": len(self.active)}
