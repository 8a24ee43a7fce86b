"""The Triton attention backend inside a real engine run gives the torch backend's tokens.

On CPU the layers pick the torch backend; this test swaps the Triton one in (interpreted), so
the seam itself — metadata, the pool's strided views, mixed prefill/decode steps — is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.attention_backends import TritonAttentionBackend
from engine.core.sampling_params import SamplingParams
from engine.llm import LLM


@pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check; test_cuda covers the GPU")
@pytest.mark.parametrize("arch", ["qwen3"])
def test_same_greedy_tokens_as_the_torch_backend(model_dirs: dict[str, Path], arch: str) -> None:
    prompts = [[0, *range(10, 30)], [0, 5, 6], [0, *range(40, 47)]]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    llm = LLM(str(model_dirs[arch]), kv_cache_bytes=1 << 20, block_size=4, max_num_batched_tokens=16)
    want = [o.token_ids for o in llm.generate(prompts, params)]
    for attn in next(iter(llm.engine.models.values())).model.kv_layers():
        attn.backend = TritonAttentionBackend()
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert got == want
