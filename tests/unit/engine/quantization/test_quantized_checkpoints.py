"""Quantized checkpoints load into quantized layers and compute what their dequantized weights do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from quant_checkpoints import set_quant_config, write_quantized

from engine.config import ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError, ModelLoadError, UnsupportedQuantizationError
from engine.layers.quantized_linear import QuantizedLinear
from engine.llm import LLM
from engine.quantization.tensors import quantize

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
PROMPTS = [[0, 4, 5, 6], [0, 9, 10, 11, 12, 13]]


def _llm(path: Path, **kw: object) -> LLM:
    return LLM(str(path), kv_cache_bytes=1 << 20, **kw)  # type: ignore[arg-type]


def _quantized_layers(llm: LLM) -> list[QuantizedLinear]:
    model = next(iter(llm.engine.models.values())).model
    return [m for m in model.modules() if isinstance(m, QuantizedLinear)]


def _assert_same_generation(a: LLM, b: LLM) -> None:
    for x, y in zip(a.generate(PROMPTS, GREEDY), b.generate(PROMPTS, GREEDY), strict=True):
        assert x.token_ids == y.token_ids
        lx = [lp.logprob for lp in x.outputs[0].logprobs or []]
        ly = [lp.logprob for lp in y.outputs[0].logprobs or []]
        assert len(lx) == len(x.token_ids)
        assert lx == pytest.approx(ly, abs=1e-4)


SCHEMES = [
    ("hf-fp8-block", "llama", (128, 128), "float8_e4m3fn"),
    ("hf-fp8-block", "qwen3", (16, 32), "float8_e4m3fn"),
    ("hf-fp8-tensor", "qwen2", (128, 128), "float8_e4m3fn"),
    ("ct-fp8-tensor", "mistral", (128, 128), "float8_e4m3fn"),
    ("ct-fp8-channel", "qwen3", (128, 128), "float8_e4m3fn"),
    ("ct-fp8-block", "llama", (32, 16), "float8_e4m3fn"),
    ("ct-int8-channel", "qwen2", (128, 128), "int8"),
    ("ct-int8-packed", "llama", (128, 128), "int8"),
]


@pytest.mark.parametrize(("scheme", "arch", "block", "storage"), SCHEMES)
def test_checkpoint_matches_its_dequantized_weights(
    model_dirs: dict[str, Path], tmp_path: Path, scheme: str, arch: str, block: tuple[int, int], storage: str
) -> None:
    path = write_quantized(model_dirs[arch], tmp_path / "q", scheme, block)
    quantized = _llm(path)
    layers = _quantized_layers(quantized)
    assert len(layers) == 4 * 2  # qkv, o, gate_up, down in each of two decoder layers
    assert {str(layer.weight.dtype) for layer in layers} == {f"torch.{storage}"}
    _assert_same_generation(quantized, _llm(tmp_path / "q-reference"))
    assert quantized.engine.models["q"].info().quantization == storage.replace("float8_e4m3fn", "fp8") + (
        f"-block{block[0]}x{block[1]}" if "block" in scheme else ""
    )


def test_layer_forward_is_dequantize_then_matmul(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = write_quantized(model_dirs["qwen3"], tmp_path / "q", "hf-fp8-block", (16, 32))
    layer = _quantized_layers(_llm(path))[0]
    x = torch.randn(3, layer.weight.shape[1])
    scale = layer.weight_scale.repeat_interleave(32, dim=1)[:, : layer.weight.shape[1]]
    expected = F.linear(x, layer.weight.float() * scale, layer.bias)
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_quantize_at_load_matches_rowwise_reference(
    model_dirs: dict[str, Path], tmp_path: Path, quantization: str
) -> None:
    llm = _llm(model_dirs["llama"], quantization=quantization)
    layers = _quantized_layers(llm)
    assert len(layers) == 8
    assert llm.engine.models["llama"].info().quantization == quantization
    plain = _llm(model_dirs["llama"]).engine.models["llama"].model
    plain_weights = [m.weight for m in plain.modules() if type(m).__name__.endswith("ParallelLinear")]
    for layer, weight in zip(layers, plain_weights, strict=True):  # exactly quantize(), row by row
        q, scale = quantize(weight, quantization)
        assert torch.equal(layer.weight.view(torch.int8), q.view(torch.int8))
        assert torch.equal(layer.weight_scale, scale)
    # Generation as from the rowwise-quantized checkpoint (whose writer keeps bf16 scales, as
    # llm-compressor does: the logprobs differ by that rounding, the greedy tokens do not).
    write_quantized(model_dirs["llama"], tmp_path / "q", f"ct-{quantization}-channel")
    reference = _llm(tmp_path / "q-reference").generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == [r.token_ids for r in reference]


def test_model_spec_and_llm_validate_the_request(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(EngineConfigError, match="int4"):
        ModelSpec(name="m", path="x", quantization="int4")
    path = write_quantized(model_dirs["llama"], tmp_path / "q", "hf-fp8-block")
    with pytest.raises(UnsupportedQuantizationError, match=r"already quantized.*fp8-block128x128"):
        _llm(path, quantization="int8")


REFUSED = [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "'awq' is not supported"),
    ({"quant_method": "gptq", "bits": 4}, "'gptq' is not supported"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes' is not supported"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "fp8 format 'e5m2'"),
    (
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group"}}
            },
        },
        "int 4-bit weights are not supported",
    ),
    (
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "group"}}
            },
        },
        "strategy 'group'",
    ),
    (
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": False},
                }
            },
        },
        "asymmetric",
    ),
    (
        {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["model.layers.0.mlp"],
        },
        "unquantized layers other than lm_head",
    ),
]


@pytest.mark.parametrize(("config", "message"), REFUSED)
def test_unsupported_schemes_are_refused_by_name(
    model_dirs: dict[str, Path], tmp_path: Path, config: dict[str, object], message: str
) -> None:
    path = tmp_path / "m"
    shutil.copytree(model_dirs["llama"], path)
    set_quant_config(path, config)
    with pytest.raises(UnsupportedQuantizationError, match=message):
        _llm(path)


def test_nonzero_zero_point_and_wrong_storage_are_errors(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    path = write_quantized(model_dirs["qwen2"], tmp_path / "q", "ct-int8-channel")
    tensors = load_file(path / "model.safetensors")
    name = next(n for n in tensors if n.endswith("weight_zero_point"))
    tensors[name] = torch.ones_like(tensors[name])
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(UnsupportedQuantizationError, match="asymmetric"):
        _llm(path)
    path = tmp_path / "f"
    shutil.copytree(model_dirs["qwen2"], path)  # float weights under an fp8 config
    set_quant_config(path, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    with pytest.raises(ModelLoadError, match=r"weight must be torch\.float8_e4m3fn, not torch\.float32"):
        _llm(path)


def test_engine_models_setting_reads_quantization(tmp_path: Path) -> None:
    from strongroom.config import ConfigError, load_settings

    config = tmp_path / "strongroom.toml"
    config.write_text('[engine]\nmodels = [{ name = "m", path = "models/m", quantization = "fp8" }]\n')
    assert load_settings(config, environ={}).engine.models[0].quantization == "fp8"
    config.write_text('[engine]\nmodels = [{ name = "m", path = "models/m", quantization = "awq" }]\n')
    with pytest.raises((ConfigError, EngineConfigError), match="awq"):
        load_settings(config, environ={})
