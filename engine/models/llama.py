"""Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2): reads like single-device code.

Differences between the family members are config flags: qkv bias (Qwen2), o_proj bias
(Llama's ``attention_bias``), sliding window (Mistral), tied embeddings.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from engine.attention_backends.metadata import AttentionMetadata
from engine.layers import (
    Attention,
    MergedColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    SiluAndMul,
    VocabParallelEmbedding,
)
from engine.loading.model_config import ModelConfig

__all__ = ["LlamaAttention", "LlamaDecoderLayer", "LlamaForCausalLM", "LlamaMLP"]


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d = config.head_dim
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, d, config.num_heads, config.num_kv_heads, bias=config.qkv_bias
        )
        self.num_heads, self.num_kv_heads, self.head_dim = (
            self.qkv_proj.num_heads,
            self.qkv_proj.num_kv_heads,
            d,
        )
        self.o_proj = RowParallelLinear(config.num_heads * d, config.hidden_size, bias=config.o_bias)
        self.rotary_emb = RotaryEmbedding(d, config.rope_theta, config.rope_scaling)
        self.attn = Attention(
            self.num_heads, self.num_kv_heads, d, scale=d**-0.5, sliding_window=config.sliding_window
        )
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        # positions: [num_tokens]; x: [num_tokens, hidden] -> [num_tokens, hidden]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # per-head norm before RoPE (Qwen3)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary_emb(positions, q, k)
        out = self.attn(q, k, v, meta)  # [num_tokens, num_heads, head_dim]
        y: torch.Tensor = self.o_proj(out.flatten(1))
        return y


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [size, size], bias=config.mlp_bias)
        self.down_proj = RowParallelLinear(size, config.hidden_size, bias=config.mlp_bias)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, hidden] -> [num_tokens, hidden]
        y: torch.Tensor = self.down_proj(self.act(self.gate_up_proj(x)))
        return y


class LlamaDecoderLayer(nn.Module):
    attention_class: type[LlamaAttention] = LlamaAttention

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = self.attention_class(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x: the previous layer's MLP output (or the embeddings); residual: the stream before it.
        # Each residual add happens in the norm after it; returns (mlp output, residual stream).
        if residual is None:
            h, residual = self.input_layernorm(x), x
        else:
            h, residual = self.input_layernorm.forward_with_residual(x, residual)
        h, residual = self.post_attention_layernorm.forward_with_residual(
            self.self_attn(positions, h, meta), residual
        )
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, layer_class: type[LlamaDecoderLayer]) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(layer_class(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        # token_ids, positions: [num_tokens] -> hidden: [num_tokens, hidden]
        x = self.embed_tokens(token_ids)
        if not self.layers:
            return self.norm(x)  # type: ignore[no-any-return]
        residual: torch.Tensor | None = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta)
        assert residual is not None
        y, _ = self.norm.forward_with_residual(x, residual)
        return y


class LlamaForCausalLM(nn.Module):
    layer_class: type[LlamaDecoderLayer] = LlamaDecoderLayer
    packed_modules: ClassVar[dict[str, tuple[str, int | str]]] = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }
    """Checkpoint module name -> (our packed module, shard id) for the weight loader."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, self.layer_class)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        y: torch.Tensor = self.model(token_ids, positions, meta)
        return y

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [num_seqs, hidden] -> [num_seqs, vocab_size] float32
        logits: torch.Tensor = self.lm_head(hidden)
        return logits.float()

    def kv_layers(self) -> list[Attention]:
        return [layer.self_attn.attn for layer in self.model.layers]  # type: ignore[union-attr,misc]
