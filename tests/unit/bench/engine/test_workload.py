from __future__ import annotations

import random

import pytest

from bench.engine.workload import nano_vllm_workload


def test_totals_match_nano_vllm() -> None:
    workload = nano_vllm_workload()
    assert workload.num_requests == 256
    assert workload.num_prompt_tokens == 142_827
    assert workload.num_output_tokens == 133_966
    assert workload.temperature == 0.6


def test_same_stream_as_nano_vllm_bench_py() -> None:
    # nano-vllm's bench.py, with the module-level random functions it uses.
    random.seed(0)
    prompts = [[random.randint(0, 10000) for _ in range(random.randint(100, 1024))] for _ in range(256)]
    max_tokens = [random.randint(100, 1024) for _ in range(256)]
    workload = nano_vllm_workload()
    assert workload.prompt_token_ids == prompts
    assert workload.max_tokens == max_tokens


def test_scaled_workload_is_a_prefix_of_the_full_one() -> None:
    full = nano_vllm_workload()
    small = full.scaled(0.05)
    assert small.num_requests == 13
    for prompt, full_prompt, m, full_m in zip(
        small.prompt_token_ids, full.prompt_token_ids, small.max_tokens, full.max_tokens, strict=False
    ):
        assert prompt == full_prompt[: round(len(full_prompt) * 0.05)]
        assert m == round(full_m * 0.05)
    assert full.scaled(1.0) is full
    assert full.scaled(0.05) == small


@pytest.mark.parametrize("scale", [0.0, -1.0, 1.5])
def test_bad_scale_is_rejected(scale: float) -> None:
    with pytest.raises(ValueError, match="scale"):
        nano_vllm_workload().scaled(scale)


def test_the_warm_up_has_every_prefill_shape_and_none_of_the_prompts_blocks() -> None:
    work = nano_vllm_workload().scaled(0.05)
    warm = work.warm_up()
    assert [len(p) for p in warm.prompt_token_ids] == [len(p) for p in work.prompt_token_ids]
    assert all(w == p[::-1] for w, p in zip(warm.prompt_token_ids, work.prompt_token_ids, strict=True))
    assert warm.max_tokens == [min(m, 8) for m in work.max_tokens]
    assert work.warm_up(2).num_output_tokens == 2 * work.num_requests
