from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError, InvalidRequestError, ModelLoadError, UnsupportedArchitectureError
from engine.llm import LLM
from engine.llm_engine import LLMEngine

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def engine_for(path: Path) -> LLMEngine:
    return LLMEngine(EngineConfig(models=(ModelSpec(name="m", path=str(path)),), kv_cache_bytes=1 << 20))


def test_unsupported_architecture_is_named(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(model_dirs["llama"], tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedArchitectureError, match="GPT2LMHeadModel"):
        engine_for(path)


@pytest.mark.parametrize("missing", ["config.json", "tokenizer.json", "model.safetensors"])
def test_missing_file_is_named(model_dirs: dict[str, Path], tmp_path: Path, missing: str) -> None:
    path = copy(model_dirs["qwen2"], tmp_path / "m")
    (path / missing).unlink()
    with pytest.raises(ModelLoadError, match=f"missing file {missing}"):
        engine_for(path)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        engine_for(tmp_path / "nothing")


def test_sharded_checkpoint_loads_like_the_single_file(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(model_dirs["qwen2"], tmp_path / "m")
    tensors = load_file(path / "model.safetensors")
    (path / "model.safetensors").unlink()
    names = sorted(tensors)
    half = len(names) // 2
    shards = {
        "model-00001-of-00002.safetensors": names[:half],
        "model-00002-of-00002.safetensors": names[half:],
    }
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, path / file)
    weight_map = {k: f for f, keys in shards.items() for k in keys}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    prompt = [0, 4, 5, 6]
    sharded = LLM(str(path), kv_cache_bytes=1 << 20).generate([prompt], GREEDY)
    single = LLM(str(model_dirs["qwen2"]), kv_cache_bytes=1 << 20).generate([prompt], GREEDY)
    assert sharded[0].token_ids == single[0].token_ids
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model-00002-of-00002"):
        engine_for(path)


def test_weight_of_wrong_shape_is_an_error(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = copy(model_dirs["llama"], tmp_path / "m")
    tensors = load_file(path / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(3)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"model\.norm\.weight"):
        engine_for(path)


def test_llm_api_text_ids_chat_and_half_precision(model_dirs: dict[str, Path]) -> None:
    llm = LLM(models={"a": model_dirs["llama"], "b": model_dirs["qwen3"]}, kv_cache_bytes=1 << 20)
    outs = llm.generate(["hello world", "the fox"], GREEDY)
    assert [len(o.token_ids) for o in outs] == [8, 8]
    assert all(o.finish_reason == "length" and isinstance(o.text, str) for o in outs)
    ids = llm.generate([[0, 1, 2]], GREEDY, model="b")
    assert len(ids[0].token_ids) == 8
    two = llm.generate(
        [[0, 1], [0, 2]], [GREEDY, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)]
    )
    assert [len(o.token_ids) for o in two] == [8, 3]
    with pytest.raises(InvalidRequestError):
        llm.generate([[0, 1], [0, 2]], [GREEDY])
    chat = llm.chat([{"role": "user", "content": "hi"}], GREEDY)
    text_prompt = "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert chat[0].token_ids == llm.generate([text_prompt], GREEDY)[0].token_ids
    bf16 = LLM(str(model_dirs["llama"]), dtype="bfloat16", kv_cache_bytes=1 << 20)
    assert bf16.engine.models["llama"].info().dtype == "bfloat16"
    assert len(bf16.generate("hello", GREEDY)[0].token_ids) == 8


def test_stop_token_and_eos_end_generation(model_dirs: dict[str, Path]) -> None:
    llm = LLM(str(model_dirs["llama"]), kv_cache_bytes=1 << 20)
    free = llm.generate([[0, 9, 10]], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]
    stop_id = free.token_ids[3]
    cut = llm.generate([[0, 9, 10]], SamplingParams(temperature=0, max_tokens=8, stop_token_ids=(stop_id,)))[
        0
    ]
    assert cut.finish_reason == "stop"
    assert cut.token_ids == free.token_ids[: free.token_ids.index(stop_id) + 1]


def test_demo_model_loads(tmp_path: Path) -> None:
    from engine.loading.demo import DEMO_MODELS, write_demo_model

    name = next(iter(DEMO_MODELS))
    path = write_demo_model(name, tmp_path / name)
    llm = LLM(str(path), kv_cache_bytes=1 << 20)
    assert len(llm.generate("hello", GREEDY)[0].token_ids) == 8


def test_config_validation() -> None:
    with pytest.raises(EngineConfigError, match="duplicate"):
        EngineConfig(models=(ModelSpec(name="a", path="x"), ModelSpec(name="a", path="y")))
    with pytest.raises(EngineConfigError, match="block_size"):
        EngineConfig(block_size=12)
    with pytest.raises(EngineConfigError, match="dtype"):
        ModelSpec(name="a", path="x", dtype="int8")
    with pytest.raises(EngineConfigError):
        EngineConfig(kv_cache_fraction=0)
    with pytest.raises(EngineConfigError, match="long_prefill_token_threshold"):
        EngineConfig(long_prefill_token_threshold=0)
    with pytest.raises(EngineConfigError, match="pipeline_parallel_size must be >= 1"):
        EngineConfig(pipeline_parallel_size=0)
    with pytest.raises(EngineConfigError, match=r"spawned_ranks must be in \[1, 4\]"):
        EngineConfig(tensor_parallel_size=2, pipeline_parallel_size=2, spawned_ranks=5)
    assert EngineConfig(tensor_parallel_size=2, pipeline_parallel_size=3).world_size == 6
    with pytest.raises(InvalidRequestError):
        LLM()


def test_stop_string_ends_generation_before_it(model_dirs: dict[str, Path]) -> None:
    llm = LLM(str(model_dirs["qwen3"]), kv_cache_bytes=1 << 20)
    prompt = [0, *range(20, 30)]
    free = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))[0]
    # Random weights emit broken UTF-8 too; stop on a plain-ASCII pair from the later text.
    text = free.text
    stop = next(
        text[i : i + 2]
        for i in range(len(text) // 3, len(text) - 1)
        if text[i : i + 2].isascii() and text[i : i + 2].isalnum()
    )
    cut = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, stop=(stop,)))[
        0
    ]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.index(stop)]
    assert len(cut.token_ids) < len(free.token_ids)
