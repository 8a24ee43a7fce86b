"""The CUDA fused step over quantized layers (interpreted on CPU) gives the model's own greedy tokens:
decode and the 33-row prefill through ``quant_gemv``; with its row limit at 16, the prefill of FP8
weights through ``torch._scaled_mm``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.tuning import DEFAULT_TUNING

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check")

_PROMPTS = [[0, *range(10, 39)], [0, 5, 6]]
_TUNING = replace(DEFAULT_TUNING, small_batch_max_splits=2)


@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_fused_step_runs_quant_gemv_and_keeps_tokens(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, quantization: str
) -> None:
    from engine.fused_step import FusedStep, gemm

    calls: dict[str, list[int]] = {"quant_gemv": [], "fp8_scaled_mm": []}
    for name, calls_of in calls.items():
        real = getattr(gemm, name)

        def spy(
            x: torch.Tensor,
            *args: object,
            _real: object = real,
            _calls: list[int] = calls_of,
            **kwargs: object,
        ) -> torch.Tensor:
            _calls.append(x.shape[0])
            return _real(x, *args, **kwargs)  # type: ignore[operator,no-any-return]

        monkeypatch.setattr(gemm, name, spy)
    llm = LLM(
        str(model_dirs["qwen3"]),
        quantization=quantization,
        kv_cache_bytes=1 << 20,
        block_size=4,
        max_num_batched_tokens=64,
        enable_prefix_caching=False,  # the fused run prefills the prompts again
    )
    runner = next(iter(llm.engine.runners.values()))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    reference = [o.token_ids for o in llm.generate(_PROMPTS, params)]
    # Weight-only everywhere: the reference's arithmetic, so its tokens.
    runner.fused = FusedStep(runner.hosted.model, replace(_TUNING, fp8_scaled_mm=False))  # type: ignore[arg-type]
    assert [o.token_ids for o in llm.generate(_PROMPTS, params)] == reference
    assert not calls["fp8_scaled_mm"]
    # The default tuning: the whole prefill round (33 rows) is a quant_gemv of two row blocks.
    calls["quant_gemv"].clear()
    runner.fused = FusedStep(runner.hosted.model, _TUNING)  # type: ignore[arg-type]
    assert [o.token_ids for o in llm.generate(_PROMPTS, params)] == reference
    assert max(calls["quant_gemv"]) > 16 and not calls["fp8_scaled_mm"]
    # Above the row limit FP8 activations in the prefill round differently
    # (bench/engine/quant_quality.py measures how much).
    calls["quant_gemv"].clear()
    runner.fused = FusedStep(runner.hosted.model, replace(_TUNING, quant_gemv_max_rows=16))  # type: ignore[arg-type]
    assert [len(o.token_ids) for o in llm.generate(_PROMPTS, params)] == [3, 3]
    assert calls["quant_gemv"] and max(calls["quant_gemv"]) <= 16
    assert bool(calls["fp8_scaled_mm"]) == (quantization == "fp8")
    assert min(calls["fp8_scaled_mm"], default=17) > 16
