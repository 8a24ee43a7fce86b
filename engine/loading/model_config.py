"""The architecture facts of one checkpoint, read from its Hugging Face ``config.json``.

Both spellings of RoPE settings are accepted: ``rope_theta`` + ``rope_scaling`` (transformers 4)
and ``rope_parameters`` (transformers 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.errors import ModelLoadError, UnsupportedArchitectureError

__all__ = ["SUPPORTED_ARCHITECTURES", "ModelConfig"]

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)
_ROPE_TYPES = ("default", "llama3", "linear")
_BARE_DECODERS = {arch.replace("ForCausalLM", "Model"): arch for arch in SUPPORTED_ARCHITECTURES}
"""Checkpoints saved from the decoder without its head (embedding models) name its class."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    checkpoint_dtype: str = "float32"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @property
    def rope_type(self) -> str:
        return str(self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default")))

    @classmethod
    def from_hf(cls, raw: dict[str, Any], source: str) -> ModelConfig:
        archs = raw.get("architectures") or []
        arch = archs[0] if archs else None
        arch = _BARE_DECODERS.get(arch, arch) if isinstance(arch, str) else arch
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedArchitectureError(
                f"{source}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )
        if raw.get("hidden_act", "silu") != "silu":
            raise UnsupportedArchitectureError(f"{source}: {arch} with hidden_act {raw['hidden_act']!r}")
        try:
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
            theta = float(rope.get("rope_theta", raw.get("rope_theta", 10000.0)))
            config = cls(
                architecture=arch,
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(raw["intermediate_size"]),
                num_layers=int(raw["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
                rope_theta=theta,
                rope_scaling=rope,
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                qkv_bias=arch == "Qwen2ForCausalLM" or bool(raw.get("attention_bias", False)),
                o_bias=arch in ("LlamaForCausalLM", "Qwen3ForCausalLM")
                and bool(raw.get("attention_bias", False)),
                mlp_bias=bool(raw.get("mlp_bias", False)),
                qk_norm=arch == "Qwen3ForCausalLM",
                sliding_window=_sliding_window(raw, arch),
                checkpoint_dtype=str(raw.get("dtype") or raw.get("torch_dtype") or "float32"),
                bos_token_id=_optional_int(raw.get("bos_token_id")),
                eos_token_ids=_int_tuple(raw.get("eos_token_id")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"{source}: config.json is missing or has a bad field: {exc}") from exc
        if config.rope_type not in _ROPE_TYPES:
            raise UnsupportedArchitectureError(f"{source}: {arch} with rope type {config.rope_type!r}")
        if config.num_heads % config.num_kv_heads:
            raise ModelLoadError(f"{source}: num_attention_heads must be a multiple of num_key_value_heads")
        return config


def _sliding_window(raw: dict[str, Any], arch: str) -> int | None:
    window = raw.get("sliding_window")
    if window is None:
        return None
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and not raw.get("use_sliding_window", False):
        return None
    return int(window)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _int_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(int(v) for v in value)
    return (int(value),)
