"""The CUDA fused step over quantized layers (interpreted on CPU) gives the model's own greedy tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check")

_PROMPTS = [[0, *range(10, 22)], [0, 5, 6]]
_TUNING = replace(DEFAULT_TUNING, small_batch_max_splits=2)


@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_fused_step_runs_quant_gemv_and_keeps_tokens(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, quantization: str
) -> None:
    from engine.fused_step import FusedStep, gemm

    calls: list[int] = []
    real = gemm.quant_gemv

    def spy(x: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append(x.shape[0])
        return real(x, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(gemm, "quant_gemv", spy)
    llm = LLM(
        str(model_dirs["qwen3"]),
        quantization=quantization,
        kv_cache_bytes=1 << 20,
        block_size=4,
        max_num_batched_tokens=16,
    )
    runner = next(iter(llm.engine.runners.values()))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    reference = [o.token_ids for o in llm.generate(_PROMPTS, params)]
    runner.fused = FusedStep(runner.hosted.model, _TUNING)  # type: ignore[arg-type]
    fused = [o.token_ids for o in llm.generate(_PROMPTS, params)]
    assert fused == reference
    assert calls and max(calls) <= 16
