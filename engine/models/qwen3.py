"""Qwen3: the Llama decoder plus an RMSNorm over each query and key head before RoPE."""

from __future__ import annotations

from engine.layers import RMSNorm
from engine.loading.model_config import ModelConfig
from engine.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM

__all__ = ["Qwen3ForCausalLM"]


class Qwen3Attention(LlamaAttention):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)


class Qwen3DecoderLayer(LlamaDecoderLayer):
    attention_class = Qwen3Attention


class Qwen3ForCausalLM(LlamaForCausalLM):
    layer_class = Qwen3DecoderLayer
