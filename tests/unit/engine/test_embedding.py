"""Embedding models in the engine: last-token pooling against transformers' Qwen3Model, unit norm,
batching that changes nothing, Matryoshka truncation, kind detection, and no KV blocks taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine import LLM
from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineConfigError, InvalidRequestError, ModelLoadError
from engine.llm_engine import LLMEngine
from tests.unit.engine.conftest import build_tokenizer

INPUTS = [[0, *range(10, 30)], [0, 5], [0, *range(40, 47)], [7]]


def write_embedding_model(path: Path, pooling: str = "lasttoken") -> Path:
    """A tiny Qwen3-Embedding: the bare ``Qwen3Model`` saved as sentence-transformers saves it."""
    from transformers import Qwen3Config, Qwen3Model

    tok = build_tokenizer()
    torch.manual_seed(7)
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        initializer_range=0.15,
        tie_word_embeddings=True,
    )
    Qwen3Model(config).save_pretrained(path)  # config.json names "Qwen3Model"
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling/config.json").write_text(
        json.dumps({"word_embedding_dimension": 64, f"pooling_mode_{pooling}": True})
    )
    return path


@pytest.fixture(scope="module")
def embed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_embedding_model(tmp_path_factory.mktemp("embed") / "qwen3-embedding")


def reference(path: Path, ids: list[int]) -> torch.Tensor:
    from transformers import Qwen3Model

    hf = Qwen3Model.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = hf(torch.tensor([ids])).last_hidden_state[0, -1]
    return F.normalize(hidden, dim=-1)


def test_last_token_pooling_matches_transformers_qwen3model(embed_dir: Path) -> None:
    llm = LLM(embed_dir)  # the kind is detected from modules.json
    assert llm.engine.model("qwen3-embedding").kind == "embedding"
    vectors = llm.embed(INPUTS)
    for ids, vector in zip(INPUTS, vectors, strict=True):
        expected = reference(embed_dir, ids)
        torch.testing.assert_close(torch.tensor(vector), expected, atol=2e-5, rtol=1e-4)
        assert torch.tensor(vector).norm().item() == pytest.approx(1.0, abs=1e-5)


def test_a_batch_of_different_lengths_equals_one_by_one(embed_dir: Path) -> None:
    # A budget of 24 tokens cuts the 4 inputs into several batches; one by one is 4 batches of 1.
    llm = LLM(embed_dir, max_num_batched_tokens=24)
    batched = llm.embed(INPUTS)
    assert llm.engine.num_steps == 0  # embeddings never run a generation step
    for ids, vector in zip(INPUTS, batched, strict=True):
        (alone,) = llm.embed([ids])
        torch.testing.assert_close(torch.tensor(vector), torch.tensor(alone), atol=1e-6, rtol=1e-5)


def test_dimensions_truncate_then_renormalise(embed_dir: Path) -> None:
    llm = LLM(embed_dir)
    (full,) = llm.embed("hello world")
    (short,) = llm.embed("hello world", dimensions=16)
    assert len(full) == 64 and len(short) == 16
    expected = F.normalize(torch.tensor(full[:16]), dim=-1)
    torch.testing.assert_close(torch.tensor(short), expected, atol=1e-6, rtol=1e-5)
    with pytest.raises(InvalidRequestError, match="dimensions must be between 1 and 64") as exc:
        llm.embed("hello", dimensions=65)
    assert exc.value.param == "dimensions"


def test_kinds_refuse_each_others_requests(embed_dir: Path, model_dirs: dict[str, Path]) -> None:
    specs = (ModelSpec(name="e", path=str(embed_dir)), ModelSpec(name="c", path=str(model_dirs["qwen3"])))
    e = LLMEngine(EngineConfig(models=specs, kv_cache_bytes=1 << 20, block_size=4))
    with pytest.raises(InvalidRequestError, match="embedding model") as exc:
        e.add_request("r", "e", [0, 1, 2], SamplingParams(max_tokens=2))
    assert exc.value.param == "model"
    with pytest.raises(InvalidRequestError, match="not an embedding model") as exc:
        e.embedding_token_ids("c", "hello")
    assert exc.value.param == "model"
    with pytest.raises(InvalidRequestError, match="must not be empty"):
        e.embedding_token_ids("e", "")


def test_embeddings_between_steps_leave_decoding_and_the_pool_untouched(
    embed_dir: Path, model_dirs: dict[str, Path]
) -> None:
    specs = (ModelSpec(name="e", path=str(embed_dir)), ModelSpec(name="c", path=str(model_dirs["qwen3"])))
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)

    def run(with_embeddings: bool) -> tuple[list[int], list[list[float]]]:
        e = LLMEngine(
            EngineConfig(models=specs, kv_cache_bytes=1 << 20, block_size=4, max_num_batched_tokens=32)
        )
        assert e.kv_cache.block_bytes == 2 * 2 * 2 * 32 * 4 * 4  # sized by the chat model alone
        e.add_request("chat", "c", [0, *range(10, 20)], greedy)
        tokens: list[int] = []
        vectors: list[list[float]] = []
        for step in range(20):
            if with_embeddings and step in (1, 3):  # arrive while the stream decodes
                e.add_embedding(f"emb{step}", "e", INPUTS)
            for _, delta in e.step():
                tokens.extend(delta.token_ids)
            vectors.extend(v for job in e.take_embeddings() for v in job.vectors)
            if not e.has_work:
                break
        assert e.block_pool.num_free_blocks == e.block_pool.num_blocks
        return tokens, vectors

    alone, _ = run(False)
    together, vectors = run(True)
    assert together == alone and len(alone) == 12
    assert len(vectors) == 2 * len(INPUTS)


def test_detection_refuses_other_pooling_and_plain_checkpoints_are_chat(
    tmp_path: Path, model_dirs: dict[str, Path]
) -> None:
    mean = write_embedding_model(tmp_path / "mean", pooling="mean_tokens")
    with pytest.raises(ModelLoadError, match="only last-token pooling"):
        LLM(mean)
    assert LLM(model_dirs["qwen3"]).engine.model("qwen3").kind == "chat"
    declared = LLM(model_dirs["qwen3"], kind="embedding")  # a chat checkpoint declared an embedder
    assert len(declared.embed("hello")[0]) == 64


@pytest.mark.timeout(60)
def test_tensor_parallel_engines_refuse_embedding_models(
    embed_dir: Path, model_dirs: dict[str, Path]
) -> None:
    specs = (ModelSpec(name="e", path=str(embed_dir)), ModelSpec(name="c", path=str(model_dirs["qwen3"])))
    config = EngineConfig(models=specs, block_size=4, kv_cache_bytes=1 << 20, tensor_parallel_size=2)
    with pytest.raises(EngineConfigError, match="embedding models are not served with tensor_parallel_size"):
        LLMEngine(config)
