"""A completion request with several prompts (OpenAI's and vLLM's batched ``prompt``).

Each prompt is served as a request of its own through the whole pipeline (authorization, filters,
quota, engine, audit: one record per prompt, under the one request id), one after another, and
the answers are merged into one body: prompt ``p``'s choice ``i`` has index ``p * n + i``, the
usage is the sum. A streamed batch runs every prompt's stream at once (``gateway.batch_stream``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.errors import BadRequestError
from gateway.openai_types import Completion, CompletionRequest, Usage

__all__ = ["merge_batch", "split_batch"]

MAX_PROMPTS = 16
"""Prompts per request: each is served in turn, so a batch holds its connection that many times."""


def split_batch(body: CompletionRequest) -> list[CompletionRequest] | None:
    """One request per prompt when ``body`` holds a batch of several; None for a single prompt."""
    prompt = body.prompt
    if not isinstance(prompt, list) or len(prompt) < 2:
        return None
    if not (all(isinstance(p, str) for p in prompt) or all(isinstance(p, list) for p in prompt)):
        return None  # token ids, or a mix the single-prompt check refuses
    if len(prompt) > MAX_PROMPTS:
        raise BadRequestError(f"at most {MAX_PROMPTS} prompts per request", param="prompt")
    return [msgspec.structs.replace(body, prompt=p) for p in prompt]


def merge_batch(answers: list[Completion], num_choices: int) -> Completion:
    """The one answer to a batch: every prompt's choices, re-indexed, and the summed usage."""
    parsed = answers
    choices: list[Any] = []
    for p, answer in enumerate(parsed):
        choices += [msgspec.structs.replace(c, index=p * num_choices + c.index) for c in answer.choices]
    prompt = sum(a.usage.prompt_tokens for a in parsed)
    completion = sum(a.usage.completion_tokens for a in parsed)
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    return msgspec.structs.replace(parsed[0], choices=choices, usage=usage)
