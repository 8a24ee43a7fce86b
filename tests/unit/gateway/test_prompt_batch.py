"""A batch of prompts: split one request per prompt, merged back with OpenAI's indices and summed usage."""

from __future__ import annotations

import pytest

from gateway.errors import BadRequestError
from gateway.openai_types import Completion, CompletionChoice, CompletionRequest, Usage
from gateway.prompt_batch import MAX_PROMPTS, merge_batch, split_batch


def _answer(texts: list[str], prompt_tokens: int) -> Completion:
    choices = [CompletionChoice(index=i, text=t, finish_reason="length") for i, t in enumerate(texts)]
    usage = Usage(
        prompt_tokens=prompt_tokens, completion_tokens=len(texts), total_tokens=prompt_tokens + len(texts)
    )
    return Completion(
        id="cmpl-1", created=1, model="m", choices=choices, usage=usage, system_fingerprint="fp_x"
    )


def test_single_prompts_are_not_batches() -> None:
    for prompt in ("a", ["a"], [1, 2, 3], [[1, 2]], None):
        assert split_batch(CompletionRequest(model="m", prompt=prompt)) is None


def test_a_batch_splits_per_prompt_and_merges_with_indices_p_times_n_plus_i() -> None:
    parts = split_batch(CompletionRequest(model="m", prompt=["a", "b"], n=2))
    assert parts is not None and [p.prompt for p in parts] == ["a", "b"]
    merged = merge_batch([_answer(["x", "y"], 3), _answer(["z", "w"], 4)], 2)
    assert [(c.index, c.text) for c in merged.choices] == [(0, "x"), (1, "y"), (2, "z"), (3, "w")]
    assert merged.usage == Usage(prompt_tokens=7, completion_tokens=4, total_tokens=11)


def test_oversized_batches_are_400s_naming_prompt() -> None:
    with pytest.raises(BadRequestError) as info:
        split_batch(CompletionRequest(model="m", prompt=["a"] * (MAX_PROMPTS + 1)))
    assert info.value.param == "prompt"


def test_a_streamed_batch_splits_too() -> None:
    parts = split_batch(CompletionRequest(model="m", prompt=["a", "b"], stream=True))
    assert parts is not None and [(p.prompt, p.is_stream) for p in parts] == [("a", True), ("b", True)]
