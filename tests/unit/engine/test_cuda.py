"""The same exactness on a CUDA device (run through the device tool: ``pytest -m gpu``)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from engine.llm import LLM
from engine.sampling_params import SamplingParams

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


def test_batch_one_fusions_change_no_token(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One sequence in bf16 takes the norm-in-GEMV path, the K/V prefetch, RoPE and the KV write
    # inside attention and the split merge inside o_proj; the same greedy tokens as the separate
    # kernels and no prefetch (the same rounding, by construction).
    from engine.kernels import split_merge
    from engine.layers import attention as attention_layer
    from engine.layers import embedding, norm

    attention = importlib.import_module("engine.kernels.paged_attention")  # the package exports the function

    prompt = [0, *range(10, 40)]
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)

    def tokens() -> list[int]:
        llm = LLM(str(model_dirs["qwen3"]), device="cuda", dtype="bfloat16", kv_cache_bytes=1 << 22)
        return llm.generate([prompt], params)[0].token_ids

    fused = tokens()
    monkeypatch.setattr(norm, "DEFER_TO_GEMV", False)
    monkeypatch.setattr(attention, "PREFETCH_SMALL_BATCH", False)
    assert tokens() == fused
    monkeypatch.setattr(split_merge, "FUSE_INTO_GEMM", False)
    assert tokens() == fused
    monkeypatch.setattr(attention_layer, "FUSED_DECODE_MAX_SEQS", 0)
    assert tokens() == fused
    monkeypatch.setattr(embedding, "FUSE_FINAL_NORM", False)
    assert tokens() == fused
