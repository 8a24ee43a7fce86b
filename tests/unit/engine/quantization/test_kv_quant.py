"""FP8 KV cache end to end on CPU: the pool's blocks, the torch path against the fused CUDA step
(interpreted), tensor parallel ranks, and the configuration that asks for it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError, ModelLoadError
from engine.llm import LLM
from engine.llm_engine import LLMEngine
from engine.quantization.kv_quant import KVScales, dequantize_kv, kv_storage_dtype, quantize_kv
from engine.tuning import DEFAULT_TUNING

_PROMPTS = [[0, *range(10, 39)], [0, 5, 6]]
_GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def test_round_trip_and_scales() -> None:
    x = torch.tensor([0.0, 0.3, -1.7, 500.0, 2.0**-12])
    c = quantize_kv(x, 1.0)
    assert c.dtype == torch.float8_e4m3fn
    assert dequantize_kv(c, 1.0, torch.float32).tolist() == [0.0, 0.3125, -1.75, 448.0, 0.0]
    # A scale widens the range: 480 / 4 = 120 is on the grid, 480 itself saturates.
    assert dequantize_kv(quantize_kv(torch.tensor([480.0]), 4.0), 4.0, torch.float32).item() == 480.0
    plain = torch.ones(2, dtype=torch.bfloat16)
    assert dequantize_kv(plain, 3.0, torch.float32) is plain  # a plain cache is read as it is
    with pytest.raises(ValueError, match="positive"):
        KVScales(0.0, 1.0)


def test_config_refuses_other_cache_dtypes() -> None:
    assert EngineConfig().kv_cache_dtype == "auto"
    with pytest.raises(EngineConfigError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int8")
    assert kv_storage_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert kv_storage_dtype("fp8", torch.bfloat16) == torch.float8_e4m3fn


def test_fp8_pool_holds_more_blocks_and_keeps_greedy_tokens(model_dirs: dict[str, Path]) -> None:
    path = str(model_dirs["llama"])
    plain = LLM(path, dtype="bfloat16", kv_cache_bytes=1 << 20, block_size=4)
    fp8 = LLM(path, dtype="bfloat16", kv_cache_bytes=1 << 20, block_size=4, kv_cache_dtype="fp8")
    # The same bytes hold twice the blocks: one byte per element instead of two.
    assert fp8.engine.stats()["blocks_total"] == 2 * plain.engine.stats()["blocks_total"]
    assert fp8.engine.kv_cache.block_bytes * 2 == plain.engine.kv_cache.block_bytes
    (model,) = fp8.engine.models.values()
    assert model.info().kv_cache_dtype == "float8_e4m3fn"
    assert next(iter(plain.engine.models.values())).info().kv_cache_dtype == "bfloat16"
    layer = model.model.kv_layers()[0]  # type: ignore[operator]
    assert layer.k_cache.dtype == layer.v_cache.dtype == torch.float8_e4m3fn
    # A random model's next tokens are near ties: compare the first token's top-5 logprobs (the
    # quality bound is tests/unit/engine/quantization/test_quality.py's).
    first = SamplingParams(temperature=0, max_tokens=1, logprobs=5)
    for got, want in zip(fp8.generate(_PROMPTS, first), plain.generate(_PROMPTS, first), strict=True):
        assert got.token_ids == want.token_ids
        assert got.outputs[0].logprobs is not None and want.outputs[0].logprobs is not None
        g, w = got.outputs[0].logprobs[0], want.outputs[0].logprobs[0]
        assert g.logprob == pytest.approx(w.logprob, abs=0.15)
        common = dict(g.top).keys() & dict(w.top).keys()
        assert len(common) >= 4
        assert [dict(g.top)[t] for t in common] == pytest.approx([dict(w.top)[t] for t in common], abs=0.15)
    assert layer.k_cache.float().abs().sum() > 0  # the keys really went into the FP8 pool


@pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check")
def test_fused_step_reads_and_writes_the_fp8_cache(model_dirs: dict[str, Path]) -> None:
    # The torch path (the reference) and the fused CUDA step's kernels, interpreted, over FP8 K/V:
    # a 30-token prefill (RoPE + KV write, then paged attention) and decodes (all in one kernel).
    from engine.fused_step import FusedStep

    llm = LLM(
        str(model_dirs["qwen3"]),
        kv_cache_dtype="fp8",
        kv_cache_bytes=1 << 20,
        block_size=4,
        max_num_batched_tokens=64,
        enable_prefix_caching=False,
    )
    runner = next(iter(llm.engine.runners.values()))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, logprobs=1)
    reference = llm.generate(_PROMPTS, params)
    runner.fused = FusedStep(runner.hosted.model, replace(DEFAULT_TUNING, small_batch_max_splits=2))  # type: ignore[arg-type]
    fused = llm.generate(_PROMPTS, params)
    assert [o.token_ids for o in fused] == [o.token_ids for o in reference]
    for got, want in zip(fused, reference, strict=True):
        assert got.outputs[0].logprobs is not None and want.outputs[0].logprobs is not None
        for g, w in zip(got.outputs[0].logprobs, want.outputs[0].logprobs, strict=True):
            assert g.logprob == pytest.approx(w.logprob, abs=1e-3)


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2)])
def test_parallel_ranks_cache_fp8_as_one_rank(model_dirs: dict[str, Path], tp: int, pp: int) -> None:
    # Tensor parallel (each rank half the KV heads) and pipeline parallel (each stage half the
    # layers): the FP8 caches of the ranks give one rank's tokens, in twice the blocks.
    def engine(tp: int, pp: int) -> LLMEngine:
        spec = ModelSpec(name="m", path=str(model_dirs["qwen2"]))
        config = EngineConfig(models=(spec,), block_size=4, kv_cache_bytes=1 << 20, tensor_parallel_size=tp,
                              pipeline_parallel_size=pp, kv_cache_dtype="fp8")  # fmt: skip
        return LLMEngine(config)

    def tokens(e: LLMEngine) -> list[list[int]]:
        for i, prompt in enumerate(_PROMPTS):
            e.add_request(str(i), "m", prompt, _GREEDY)
        out: dict[str, list[int]] = {}
        while e.has_work:
            for rid, delta in e.step():
                out.setdefault(rid, []).extend(delta.token_ids)
        return [out[str(i)] for i in range(len(_PROMPTS))]

    single = engine(1, 1)
    want, single_blocks = tokens(single), single.stats()["blocks_total"]
    del single
    parallel = engine(tp, pp)
    try:
        assert tokens(parallel) == want
        assert parallel.stats()["blocks_total"] == 2 * single_blocks
        (model,) = parallel.models.values()
        assert model.cache_dtype == torch.float8_e4m3fn
    finally:
        parallel.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_engine_over_fp8_cache_gives_the_torch_paths_tokens(model_dirs: dict[str, Path]) -> None:
    # Compiled kernels, the fused step and the decode graphs against the CPU torch path, FP8 both.
    path = str(model_dirs["qwen3"])
    options = {"kv_cache_dtype": "fp8", "kv_cache_bytes": 1 << 20, "block_size": 4, "max_num_seqs": 4}
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=1)
    want = LLM(path, **options).generate(_PROMPTS, params)  # type: ignore[arg-type]
    got = LLM(path, device="cuda", **options).generate(_PROMPTS, params)  # type: ignore[arg-type]
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    for g, w in zip(got, want, strict=True):
        assert g.outputs[0].logprobs is not None and w.outputs[0].logprobs is not None
        for a, b in zip(g.outputs[0].logprobs, w.outputs[0].logprobs, strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-2)


def _with_kv_scales(src: Path, dst: Path, scales: dict[str, float]) -> Path:
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    [file] = dst.glob("*.safetensors")
    tensors = load_file(file)
    for name, value in scales.items():
        tensors[name] = torch.tensor(value)
    save_file(tensors, file, metadata={"format": "pt"})
    return dst


def test_checkpoint_kv_scales_are_used(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    # Calibrated scales as FP8 checkpoints ship them: the layer divides by them, and the tokens
    # keep to the unquantized model's as with scale 1.0.
    src = model_dirs["llama"]
    layers = json.loads((src / "config.json").read_text())["num_hidden_layers"]
    scales = {f"model.layers.{i}.self_attn.{kv}_scale": 0.5 + i for i in range(layers) for kv in "kv"}
    path = _with_kv_scales(src, tmp_path / "scaled", scales)
    llm = LLM(str(path), dtype="bfloat16", kv_cache_bytes=1 << 20, block_size=4, kv_cache_dtype="fp8")
    (model,) = llm.engine.models.values()
    assert [a.kv_scales for a in model.model.kv_layers()] == [
        KVScales(0.5 + i, 0.5 + i) for i in range(layers)
    ]  # type: ignore[operator]
    plain = LLM(str(src), dtype="bfloat16", kv_cache_bytes=1 << 20, block_size=4)
    first = SamplingParams(temperature=0, max_tokens=1, logprobs=1)
    for got, want in zip(llm.generate(_PROMPTS, first), plain.generate(_PROMPTS, first), strict=True):
        assert got.token_ids == want.token_ids
    partial = _with_kv_scales(src, tmp_path / "partial", {"model.layers.0.self_attn.kv_scale": 2.0})
    with pytest.raises(ModelLoadError, match="KV-cache scales for some layers only"):
        LLM(str(partial), kv_cache_bytes=1 << 20)
