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


def write_random_llama(
    path: Path, fields: dict[str, Any], *, dtype: str, device: str = "cpu", seed: int = 0
) -> Path:
    """A random Llama checkpoint of any size without building the model: one safetensors shard
    per decoder layer, written as it is drawn, so a 70B shape needs one layer's memory. Every
    layer gets the same draw (drawing is the slow part; the engine's speed does not depend on
    the values)."""
    import torch
    from safetensors.torch import save_file

    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device).manual_seed(seed)
    hidden, inter, vocab = fields["hidden_size"], fields["intermediate_size"], fields["vocab_size"]
    heads, kv_heads = fields["num_attention_heads"], fields["num_key_value_heads"]
    head_dim = fields.get("head_dim") or hidden // heads

    def rand(*shape: int) -> torch.Tensor:
        std = shape[-1] ** -0.5
        return (torch.randn(*shape, generator=generator, device=device) * std).to(torch_dtype).cpu()

    path.mkdir(parents=True, exist_ok=True)
    layer = {
        "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
        "self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
        "self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
        "self_attn.o_proj.weight": rand(hidden, heads * head_dim),
        "mlp.gate_proj.weight": rand(inter, hidden),
        "mlp.up_proj.weight": rand(inter, hidden),
        "mlp.down_proj.weight": rand(hidden, inter),
        "input_layernorm.weight": torch.ones(hidden, dtype=torch_dtype),
        "post_attention_layernorm.weight": torch.ones(hidden, dtype=torch_dtype),
    }
    weight_map: dict[str, str] = {}

    def shard(name: str, tensors: dict[str, torch.Tensor]) -> None:
        save_file(tensors, str(path / name))
        weight_map.update(dict.fromkeys(tensors, name))

    outer = {
        "model.embed_tokens.weight": rand(vocab, hidden),
        "model.norm.weight": torch.ones(hidden, dtype=torch_dtype),
    }
    if not fields.get("tie_word_embeddings", False):
        outer["lm_head.weight"] = rand(vocab, hidden)
    shard("outer.safetensors", outer)
    for i in range(fields["num_hidden_layers"]):
        shard(f"layer-{i:03d}.safetensors", {f"model.layers.{i}.{k}": v for k, v in layer.items()})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    eos = vocab - 1
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "torch_dtype": dtype,
        "bos_token_id": eos,
        "eos_token_id": eos,
        **fields,
    }
    (path / "config.json").write_text(json.dumps(config, indent=1))
    _write_tokenizer(path, vocab)
    return path
