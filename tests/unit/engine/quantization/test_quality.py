"""A tiny Llama trained briefly on the demo corpus keeps its held-out perplexity within 5 % when
its weights are FP8 or INT8 (as the engine loads them), its activations too FP8 (as the CUDA
prefill runs them), or its keys and values FP8 (simulated).
The longer run and its numbers: ``bench/engine/quant_quality.py``, bench/BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench.engine.quant_quality import measure


def test_quantized_perplexity_within_five_percent() -> None:
    report = measure(steps=40, seed=0)
    ppl = report["perplexity"]
    assert ppl["fp32"] < 300  # it learned something: below the uniform guess over its vocabulary
    for variant in ("fp8", "int8", "fp8-kv", "fp8-w8a8"):
        assert report["ratio_to_fp32"][variant] == pytest.approx(1.0, abs=0.05)
        assert ppl[variant] != ppl["fp32"]  # the quantized weights are really in use
