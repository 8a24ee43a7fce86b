"""A tiny Llama trained briefly on the demo corpus keeps its held-out perplexity within 5 % when
its weights are FP8 or INT8 (as the engine loads them), its activations too FP8 (as the CUDA
prefill runs them), or its keys and values are cached as FP8 by the engine, with FP8 weights or
without.
The longer run and its numbers: ``bench/engine/quant_quality.py``, bench/BENCHMARKS.md."""

from __future__ import annotations

import pytest

from bench.engine.quant_quality import measure


def test_quantized_perplexity_within_five_percent() -> None:
    report = measure(steps=40, seed=0)
    ppl = report["perplexity"]
    assert ppl["fp32"] < 300  # it learned something: below the uniform guess over its vocabulary
    # The engine's own scorer computes what the HF model computes from the same weights.
    assert ppl["engine-fp32"] == pytest.approx(ppl["fp32"], rel=1e-4)
    for variant in ("fp8", "int8", "fp8-w8a8", "fp8-kv", "fp8+fp8-kv"):
        assert report["ratio_to_fp32"][variant] == pytest.approx(1.0, abs=0.05)
        base = ppl["engine-fp32"] if "kv" in variant else ppl["fp32"]
        assert ppl[variant] != base  # the quantized weights / cache are really in use
