"""Tiny random-weight Hugging Face checkpoints, one per supported architecture, built once per session.

Without a GPU the Triton kernels (``engine.kernels``, and the fused step that runs them) are
tested on CPU tensors through the interpreter. ``TRITON_INTERPRET`` is read when a kernel is
decorated, so it is set here, before any test module imports ``engine.kernels``; on a CUDA machine
the same tests run compiled, on the GPU (the ``device`` fixture).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
_SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello engine; paged attention over blocks of tokens",
    "银行 模型 推理 引擎 你好 世界",
    "0123456789 prefix caching and preemption by recompute",
] * 20


def build_tokenizer(specials: list[str] | None = None) -> Tokenizer:
    """A byte-level BPE over a small corpus; other ``specials`` than ours leave out the BOS template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials or _SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS, trainer)
    if specials is not None:
        return tok
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tok


def _hf_config(arch: str, vocab: int):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.15,
        bos_token_id=0,
        eos_token_id=1,
        rms_norm_eps=1e-6,
    )
    if arch == "llama":
        rope = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        }
        return LlamaConfig(**common, rope_scaling=rope, tie_word_embeddings=True)
    if arch == "mistral":
        return MistralConfig(**common, sliding_window=24, head_dim=16)
    if arch == "qwen2":
        return Qwen2Config(**common, tie_word_embeddings=False)
    if arch == "qwen3":
        return Qwen3Config(**common, head_dim=32, tie_word_embeddings=True)
    raise ValueError(arch)


def write_model(path: Path, arch: str, seed: int = 0) -> Path:
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_hf_config(arch, tok.get_vocab_size()))
    model.save_pretrained(path)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": _CHAT_TEMPLATE})
    )
    return path


@pytest.fixture
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {arch: write_model(root / arch, arch, seed=i) for i, arch in enumerate(ARCHITECTURES)}


@pytest.fixture(scope="session")
def bpe_tokenizer() -> Callable[[list[str] | None], Tokenizer]:
    """``build_tokenizer`` for tests that need other special tokens than the models here."""
    return build_tokenizer


@pytest.fixture(scope="session")
def single_rank(model_dirs: dict[str, Path]):  # type: ignore[no-untyped-def]
    """``parallel_generation.generate`` on one rank: what every tensor- and pipeline-parallel
    layout must reproduce (computed once for all of them)."""
    from engine.llm_engine import LLMEngine

    from .parallel_generation import config, generate

    return generate(LLMEngine(config(model_dirs, 1)))
