"""Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2): reads like single-device code.

Differences between the family members are config flags: qkv bias (Qwen2), o_proj bias
(Llama's ``attention_bias``), sliding window (Mistral), tied embeddings.

A pipeline stage (``engine.worker.distributed.RankPlace``) builds only its own decoder layers,
the others being weightless ``MissingLayer`` places that keep checkpoint names and layer indices
as they are; the embedding lives on the first stage, the final norm and the LM head on the last.
Between stages the activations travel as one tensor, ``carried`` [2, num_tokens, hidden]: the
last layer's output and the residual stream, before the residual add of the next norm.
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
from engine.worker.distributed import place

__all__ = ["LlamaAttention", "LlamaDecoderLayer", "LlamaForCausalLM", "LlamaMLP", "MissingLayer"]


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


class MissingLayer(nn.Module):
    """A decoder layer another pipeline stage runs: no weights here."""


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, layer_class: type[LlamaDecoderLayer]) -> None:
        super().__init__()
        stage = place()
        self.is_first_stage, self.is_last_stage = stage.is_first_stage, stage.is_last_stage
        self.stage_layers = stage.stage_layers(config.num_layers)
        self.embed_tokens = (
            VocabParallelEmbedding(config.vocab_size, config.hidden_size) if self.is_first_stage else None
        )
        self.layers = nn.ModuleList(
            layer_class(config) if i in self.stage_layers else MissingLayer()
            for i in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps) if self.is_last_stage else None

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        carried: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # token_ids, positions: [num_tokens]; carried: [2, num_tokens, hidden] from the previous
        # stage -> hidden: [num_tokens, hidden] on the last stage, else carried for the next one
        residual: torch.Tensor | None = None
        if self.embed_tokens is not None:
            x = self.embed_tokens(token_ids)
        else:
            assert carried is not None, "a later pipeline stage runs on the previous one's activations"
            x, residual = carried[0], carried[1]
        for layer in self.layers[self.stage_layers.start : self.stage_layers.stop]:
            x, residual = layer(positions, x, residual, meta)
        if self.norm is None:
            assert residual is not None
            return torch.stack((x, residual))
        if residual is None:  # no decoder layers at all
            return self.norm(x)  # type: ignore[no-any-return]
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
        if self.model.is_last_stage:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
            if config.tie_word_embeddings and self.model.embed_tokens is not None:
                self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        carried: torch.Tensor | None = None,
    ) -> torch.Tensor:
        y: torch.Tensor = self.model(token_ids, positions, meta, carried)
        return y

    def weight_target(self, name: str) -> str | None:
        """The parameter a checkpoint weight loads into on this stage; None when it belongs to
        another one. A tied LM head on a last stage without the embedding loads the embedding."""
        stage = self.model
        if name.startswith("model.layers."):
            return name if int(name.split(".", 3)[2]) in stage.stage_layers else None
        if name.startswith("model.embed_tokens."):
            if stage.embed_tokens is not None:
                return name
            tied_head = self.config.tie_word_embeddings and hasattr(self, "lm_head")
            return name.replace("model.embed_tokens.", "lm_head.") if tied_head else None
        if name.startswith("model.norm."):
            return name if stage.norm is not None else None
        return name

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [num_seqs, hidden] -> [num_seqs, vocab_size] float32
        logits: torch.Tensor = self.lm_head(hidden)
        return logits.float()

    def kv_layers(self) -> list[Attention]:
        """This stage's attention layers, in order (the KV pool holds these layers only)."""
        layers = self.model.layers[self.model.stage_layers.start : self.model.stage_layers.stop]
        return [layer.self_attn.attn for layer in layers]  # type: ignore[union-attr,misc]
