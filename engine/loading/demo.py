"""The two built-in demo models: tiny Llama-architecture checkpoints with deterministic random weights.

They exist so that ``strongroom serve`` works on a fresh machine with nothing downloaded. Their
output is noise; they prove the path from client to engine and back, not language ability.
Each is a complete Hugging Face directory (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json) produced in memory, so a caller can seal it
before anything reaches the disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from safetensors.torch import save
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

__all__ = ["DEMO_MODELS", "DemoModel", "build_demo_files", "write_demo_model"]

_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CHAT_TEMPLATE = (
    # ChatML with Hermes-style tools (the Qwen2.5 convention): definitions in the system turn,
    # calls as <tool_call> JSON, results as <tool_response> in a user turn.
    "{% if tools %}{{ '<|im_start|>system\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{% endif %}"
    "{{ '# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}"
    "{{ '\n</tools>\n\nFor each function call, return a json object with function name and arguments '"
    " + 'within <tool_call></tool_call> XML tags:\n<tool_call>\n'"
    ' + \'{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n\' }}'
    "{% endif %}"
    "{% for message in messages %}"
    "{% if tools and loop.first and message['role'] == 'system' %}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{{ '\n<tool_call>\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{{ call['function']['arguments'] | tojson }}{{ '}\n</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class DemoModel:
    name: str
    seed: int
    chat: bool
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    vocab_size: int = 512
    max_position_embeddings: int = 2048


DEMO_MODELS: dict[str, DemoModel] = {
    "demo-chat": DemoModel(name="demo-chat", seed=1, chat=True),
    "demo-base": DemoModel(name="demo-base", seed=2, chat=False),
}


def _train_tokenizer(vocab_size: int) -> Tokenizer:
    corpus = resources.files("engine.loading").joinpath("demo_data/corpus.txt").read_text(encoding="utf-8")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus.splitlines(), trainer=trainer)
    return tokenizer


def _weights(spec: DemoModel, vocab_size: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(spec.seed)
    head_dim = spec.hidden_size // spec.num_heads

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    h, i = spec.hidden_size, spec.intermediate_size
    out = {"model.embed_tokens.weight": rand(vocab_size, h), "model.norm.weight": torch.ones(h)}
    for n in range(spec.num_layers):
        p = f"model.layers.{n}."
        out[p + "self_attn.q_proj.weight"] = rand(spec.num_heads * head_dim, h)
        out[p + "self_attn.k_proj.weight"] = rand(spec.num_kv_heads * head_dim, h)
        out[p + "self_attn.v_proj.weight"] = rand(spec.num_kv_heads * head_dim, h)
        out[p + "self_attn.o_proj.weight"] = rand(h, spec.num_heads * head_dim)
        out[p + "mlp.gate_proj.weight"] = rand(i, h)
        out[p + "mlp.up_proj.weight"] = rand(i, h)
        out[p + "mlp.down_proj.weight"] = rand(h, i)
        out[p + "input_layernorm.weight"] = torch.ones(h)
        out[p + "post_attention_layernorm.weight"] = torch.ones(h)
    out["lm_head.weight"] = rand(vocab_size, h)
    return out


def build_demo_files(name: str) -> dict[str, bytes]:
    """The complete checkpoint directory of one demo model, as file name -> bytes."""
    spec = DEMO_MODELS[name]
    tokenizer = _train_tokenizer(spec.vocab_size)
    vocab_size = tokenizer.get_vocab_size()
    eos = "<|im_end|>" if spec.chat else "<|endoftext|>"
    eos_id = tokenizer.token_to_id(eos)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.hidden_size // spec.num_heads,
        "vocab_size": vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": tokenizer.token_to_id("<|endoftext|>"),
        "eos_token_id": eos_id,
    }
    tokenizer_config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "bos_token": None,
        "pad_token": "<|endoftext|>",
        "model_max_length": spec.max_position_embeddings,
        "added_tokens_decoder": {
            str(tokenizer.token_to_id(t)): {"content": t, "special": True} for t in _SPECIAL_TOKENS
        },
    }
    if spec.chat:
        tokenizer_config["chat_template"] = _CHAT_TEMPLATE
    generation_config = {"eos_token_id": eos_id, "do_sample": False}
    return {
        "config.json": json.dumps(config, indent=2, sort_keys=True).encode(),
        "generation_config.json": json.dumps(generation_config, indent=2).encode(),
        "tokenizer.json": tokenizer.to_str().encode(),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2, sort_keys=True).encode(),
        "model.safetensors": save(_weights(spec, vocab_size), metadata={"format": "pt"}),
    }


def write_demo_model(name: str, dst: Path) -> Path:
    """Write one demo model as a plaintext directory (tests and ``require_sealed = false``)."""
    dst.mkdir(parents=True, exist_ok=True)
    for file, data in build_demo_files(name).items():
        (dst / file).write_bytes(data)
    return dst
