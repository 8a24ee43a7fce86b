"""The same exactness on a CUDA device (run through the device tool: ``pytest -m gpu``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING, CudaTuning

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_cuda_greedy_matches_hf(model_dirs: dict[str, Path], arch: str) -> None:
    from transformers import AutoModelForCausalLM

    prompts = [[0, *range(10, 30)], [0, 5, 6], [0, *range(40, 47)]]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    llm = LLM(str(model_dirs[arch]), device="cuda", kv_cache_bytes=1 << 22, block_size=16)
    ours = [o.token_ids for o in llm.generate(prompts, params)]
    hf = AutoModelForCausalLM.from_pretrained(model_dirs[arch], dtype=torch.float32).cuda()
    hf.generation_config.eos_token_id = None
    for prompt, tokens in zip(prompts, ours, strict=True):
        ref = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=32, do_sample=False)
        assert tokens == ref[0, len(prompt) :].tolist()
    bf16 = LLM(str(model_dirs[arch]), device="cuda", dtype="bfloat16", kv_cache_bytes=1 << 22)
    seeded = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=16, seed=3, ignore_eos=True)
    first = bf16.generate(prompts, seeded)
    again = bf16.generate(prompts[:1], seeded)
    assert first[0].token_ids == again[0].token_ids


def test_batch_one_fusions_change_no_token(model_dirs: dict[str, Path]) -> None:
    # One sequence in bf16 takes the norm-in-GEMV path, the K/V prefetch, RoPE and the KV write
    # inside attention, the split merge inside o_proj, the final norm in the LM head and the
    # embedding gathered by the first GEMV; the same greedy tokens as the separate kernels and no
    # prefetch (the same rounding, by construction), turned off one by one.
    prompt = [0, *range(10, 40)]
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)

    def tokens(tuning: CudaTuning) -> list[int]:
        llm = LLM(
            str(model_dirs["qwen3"]), device="cuda", dtype="bfloat16", kv_cache_bytes=1 << 22, tuning=tuning
        )
        return llm.generate([prompt], params)[0].token_ids

    fused = tokens(DEFAULT_TUNING)
    tuning = replace(DEFAULT_TUNING, norm_in_gemv=False, prefetch_small_batch=False)
    assert tokens(tuning) == fused
    for off in (
        {"merge_in_gemm": False},
        {"rope_in_attention_max_seqs": 0},
        {"final_norm_in_lm_head": False},
        {"gather_in_first_gemv": False},
        {"pdl": False},
    ):
        tuning = replace(tuning, **off)
        assert tokens(tuning) == fused


@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_quantized_o_proj_merge_changes_no_token(model_dirs: dict[str, Path], quantization: str) -> None:
    # One sequence with FP8 / INT8 weights: o_proj's quant_gemv merges attention's split
    # partials in its loads; the same greedy tokens as the merge kernel before it.
    prompt = [0, *range(10, 40)]
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)

    def tokens(tuning: CudaTuning) -> list[int]:
        llm = LLM(str(model_dirs["qwen3"]), device="cuda", dtype="bfloat16", kv_cache_bytes=1 << 22,
                  quantization=quantization, tuning=tuning)  # fmt: skip
        return llm.generate([prompt], params)[0].token_ids

    assert tokens(DEFAULT_TUNING) == tokens(replace(DEFAULT_TUNING, merge_in_gemm=False))


def test_greedy_steps_on_the_device_change_no_token(model_dirs: dict[str, Path]) -> None:
    # One sequence greedy: its steps run on the device's inputs (engine.kernels.step_advance),
    # staged again where a block is added; two sequences, the shorter ending, leave one that the
    # device carries on; a sampled sequence takes the sampler's token. All as without the tail.
    prompts = [[0, *range(10, 40)], [0, 5, 6, 7]]
    greedy = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    short = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, max_tokens=20, seed=5, ignore_eos=True)

    def run(tuning: CudaTuning) -> tuple[list[list[int]], int]:
        llm = LLM(
            str(model_dirs["qwen3"]), device="cuda", dtype="bfloat16", kv_cache_bytes=1 << 22, tuning=tuning
        )
        graphs = llm.engine.runners[llm.model_names[0]].graphs
        assert graphs is not None
        tokens = [llm.generate([prompts[0]], greedy)[0].token_ids]
        tokens += [o.token_ids for o in llm.generate(prompts, [greedy, short])]
        device_steps = graphs.num_device_steps
        tokens.append(llm.generate([prompts[0]], sampled)[0].token_ids)
        assert graphs.num_device_steps == device_steps  # sampled tokens are not the graph's argmax
        return tokens, device_steps

    on, device_steps = run(DEFAULT_TUNING)
    assert device_steps > 40  # most of 39 + 33 single-sequence steps (16-token blocks)
    off, none = run(replace(DEFAULT_TUNING, greedy_tail_max_bucket=0))
    assert none == 0
    assert on == off
