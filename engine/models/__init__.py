"""Decoder architectures by their Hugging Face ``architectures`` name."""

from __future__ import annotations

from torch import nn

from engine.errors import UnsupportedArchitectureError
from engine.loading.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.models.qwen3 import Qwen3ForCausalLM

__all__ = ["ARCHITECTURES", "LlamaForCausalLM", "Qwen3ForCausalLM", "model_class"]

ARCHITECTURES: dict[str, type[LlamaForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}


def model_class(config: ModelConfig) -> type[nn.Module]:
    try:
        return ARCHITECTURES[config.architecture]
    except KeyError:
        raise UnsupportedArchitectureError(f"architecture {config.architecture!r} is not supported") from None
