"""Random-weight Qwen3-shaped checkpoints for benchmarks, built with HF transformers (no hub access).

Three shapes: ``tiny`` (2 layers, hidden 64; CPU), ``small`` (4 layers, hidden 256: a CPU
model whose prefill costs arithmetic, not just Python) and ``qwen3-0.6b`` (the real Qwen3-0.6B
config; GPU, bf16). The tokenizer is a word-level one with one token per id, so any id decodes; the
benchmarks feed token ids, never text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        # The workload's prompt ids go up to 10000.
        "vocab_size": 10240,
        "max_position_embeddings": 4096,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 10240,
        "max_position_embeddings": 8192,
    },
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
    },
}
_COMMON = {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}


def build_random_qwen3(path: Path, *, shape: str, dtype: str, device: str = "cpu", seed: int = 0) -> Path:
    """Write config, safetensors, tokenizer and generation config for a random Qwen3 to ``path``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; one of {sorted(SHAPES)}")
    fields = {**_COMMON, **SHAPES[shape]}
    eos = fields["vocab_size"] - 1
    config = Qwen3Config(**fields, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    _write_tokenizer(path, fields["vocab_size"])
    return path


def _write_tokenizer(path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    eos = f"t{vocab_size - 1}"
    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos, "bos_token": None}))
