"""A model as wide as Llama-3-8B (hidden 4,096; its other dimensions tiny) takes every batch-1 norm
fusion through the chunked norm-and-GEMV, with the tokens of the norm kernels it replaces; the
tuning's ``norm_in_gemv_max_k`` at 1,024 (the one-tile rows only) turns the fusions off.

Interpreted on CPU (``TRITON_INTERPRET``, tests/unit/engine/conftest.py), as ``test_step``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING, CudaTuning

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="an interpreter check; test_cuda covers the GPU"
)

HIDDEN = 4096
_PROMPT = [0, 10, 11]
_TUNING = replace(DEFAULT_TUNING, small_batch_max_splits=2, norm_in_gemv_max_k=8192)
"""Production tuning but for two key splits (the interpreter runs each program in turn) and the
long rows fused (not yet the default: not yet timed on a GPU)."""


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory, bpe_tokenizer: Callable[[None], Tokenizer]) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("wide-llama")
    tok = bpe_tokenizer(None)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
        initializer_range=0.15, bos_token_id=0, eos_token_id=1, rms_norm_eps=1e-6, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # norm weights away from 1, so a norm computed wrongly shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(torch.rand_like(param) + 0.5)
    model.save_pretrained(path)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return path


def _run(llm: LLM, tuning: CudaTuning | None, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """(greedy tokens of the prompt alone, widths of the normed_gemv calls); ``tuning`` None: the
    model's own forward."""
    from engine.fused_step import FusedStep, gemm, step

    widths: list[int] = []
    for module in (gemm, step):
        real = module.normed_gemv

        def spy(
            pending: object, weight: torch.Tensor, *a: object, _real: object = real, **k: object
        ) -> object:
            widths.append(weight.shape[1])
            return _real(pending, weight, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(module, "normed_gemv", spy)
    runner = next(iter(llm.engine.runners.values()))
    runner.fused = None if tuning is None else FusedStep(runner.hosted.model, tuning)  # type: ignore[arg-type]
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    (out,) = llm.generate([_PROMPT], params)
    monkeypatch.undo()
    return out.token_ids, widths


@pytest.mark.parametrize(
    ("dtype", "quantization"), [("bfloat16", None), ("float32", None), ("bfloat16", "fp8")]
)
def test_wide_rows_fuse_their_norms_and_keep_the_tokens(
    wide_model: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, quantization: str | None
) -> None:
    llm = LLM(str(wide_model), dtype=dtype, kv_cache_bytes=1 << 20, block_size=4, max_num_batched_tokens=16,
              quantization=quantization, enable_prefix_caching=False)  # fmt: skip
    fused, widths = _run(llm, _TUNING, monkeypatch)
    # The decode step: qkv (gathering its embedding row), gate_up (summing o_proj's output or
    # its split-K partials, and the residual) and the LM head (the final norm): all 4,096 wide.
    assert widths == [HIDDEN] * 3
    unfused, none = _run(llm, replace(_TUNING, norm_in_gemv_max_k=1024), monkeypatch)
    assert none == []
    assert fused == unfused
    if dtype == "float32":  # the model's own forward (float32: no bf16 rounding to land apart)
        assert fused == _run(llm, None, monkeypatch)[0]
