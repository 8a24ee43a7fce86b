"""The Triton attention backend inside a real engine run gives the torch backend's tokens.

On CPU the layers pick the torch backend; this test swaps the Triton one in (interpreted), so
the seam itself — metadata, the pool's strided views, mixed prefill/decode steps — is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.attention import TritonPagedAttention
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
        attn.backend = TritonPagedAttention()
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert got == want


@pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check; test_cuda covers the GPU")
def test_decode_fusions_give_the_unfused_tokens(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The decode-only GPU path on CPU (interpreted): skinny GEMMs, SiLU-and-mul inside the down
    # projection, o_proj/down split-K partials summed inside the next RMSNorm.
    import importlib

    from engine.kernels import SkinnyGemmConfig

    # The module, not the function of the same name that engine.kernels exports.
    skinny_gemm_module = importlib.import_module("engine.kernels.skinny_gemm")
    from engine.layers import linear
    from engine.models import llama

    prompts = [[0, *range(10, 30)], [0, 5, 6]]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    llm = LLM(str(model_dirs["qwen3"]), kv_cache_bytes=1 << 20, block_size=4, max_num_batched_tokens=16)
    want = [o.token_ids for o in llm.generate(prompts, params)]
    calls: list[bool] = []

    def skinny(x: torch.Tensor) -> bool:
        calls.append(x.shape[0] <= 16)
        return x.shape[0] <= 16

    monkeypatch.setattr(linear, "is_skinny", skinny)
    monkeypatch.setattr(llama, "is_skinny", skinny)
    split = SkinnyGemmConfig(block_n=16, block_k=16, split_k=2)
    monkeypatch.setattr(skinny_gemm_module, "skinny_gemm_config", lambda m, n, k: split)
    import engine.kernels

    fused_norms: list[int] = []
    real_norm = engine.kernels.rms_norm_split_k

    def norm_spy(*args: object, **kwargs: object) -> object:
        fused_norms.append(1)
        return real_norm(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.kernels, "rms_norm_split_k", norm_spy)
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert any(calls) and fused_norms and got == want
