"""Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2): reads like single-device code.

Differences between the family members are config flags: qkv bias (Qwen2), o_proj bias
(Llama's ``attention_bias``), sliding window (Mistral), tied embeddings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
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
from engine.layers.linear import is_skinny
from engine.loading.model_config import ModelConfig

if TYPE_CHECKING:
    from engine.kernels.normed_gemv import PendingNorm, TokenEmbedding
    from engine.kernels.skinny_gemm import SplitKPartials

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

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor | PendingNorm, meta: AttentionMetadata
    ) -> torch.Tensor | SplitKPartials:
        # x: [num_tokens, hidden], or its norm left to qkv_proj (one row on CUDA); decode on CUDA
        # may return o_proj's split-K partials (see norm)
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if x.is_cuda:
            # One kernel for [head norm,] RoPE and the cache write.
            inv_freq = self.rotary_emb.inv_freq
            # (At one decode token o_proj may get attention's unmerged partials: split_merge.)
            fused = self.attn.forward_fused(positions, q, k, v, meta, inv_freq, self.qk_norm_weights())
            return self.o_proj.forward_deferred(
                fused.flatten(1) if isinstance(fused, torch.Tensor) else fused
            )
        q, k = self.normalize_qk(q, k)
        q, k = self.rotary_emb(positions, q, k)
        out = self.attn(q, k, v, meta)  # [num_tokens, num_heads, head_dim]
        return self.o_proj.forward_deferred(out.flatten(1))

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head normalisation before RoPE; none in Llama (Qwen3 overrides)."""
        return q, k

    def qk_norm_weights(self) -> tuple[torch.Tensor, torch.Tensor, float] | None:
        """(q weight, k weight, eps) of the per-head norm for the fused kernel; None in Llama."""
        return None


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(config.hidden_size, [size, size], bias=config.mlp_bias)
        self.down_proj = RowParallelLinear(size, config.hidden_size, bias=config.mlp_bias)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor | PendingNorm) -> torch.Tensor | SplitKPartials:
        gate_up = self.gate_up_proj(x)
        if is_skinny(gate_up):  # decode on CUDA: SiLU-and-mul inside the down projection
            return self.down_proj.forward_silu_mul(gate_up)
        y: torch.Tensor = self.down_proj(self.act(gate_up))
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
        self,
        positions: torch.Tensor,
        x: torch.Tensor | SplitKPartials | TokenEmbedding,
        residual: torch.Tensor | None,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor | SplitKPartials, torch.Tensor]:
        # x: the previous layer's MLP output (or the embeddings); residual: the stream before it.
        # Each add is fused into the norm after it, and at one row on CUDA the norm into the GEMM
        # after that (defer); returns (mlp output, residual stream).
        h: torch.Tensor | PendingNorm
        if residual is None:  # the embeddings (one token's left to the first GEMM to gather)
            h, residual = self.input_layernorm.forward_first(cast("torch.Tensor | TokenEmbedding", x))
        else:
            x = cast("torch.Tensor | SplitKPartials", x)  # a layer's output
            h, residual = self.input_layernorm.forward_with_residual(x, residual, defer=True)
        attn = self.self_attn(positions, h, meta)
        h, residual = self.post_attention_layernorm.forward_with_residual(attn, residual, defer=True)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, layer_class: type[LlamaDecoderLayer]) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(layer_class(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor | PendingNorm:
        # token_ids, positions: [num_tokens] -> hidden: [num_tokens, hidden]; at one row on CUDA
        # the final norm may be left to the LM head (a PendingNorm, see compute_logits)
        if not self.layers:
            return self.norm(self.embed_tokens(token_ids))  # type: ignore[no-any-return]
        x: torch.Tensor | SplitKPartials | TokenEmbedding = self.embed_tokens.forward_deferred(token_ids)
        residual: torch.Tensor | None = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta)
        assert residual is not None
        y, _ = self.norm.forward_with_residual(cast("torch.Tensor | SplitKPartials", x), residual, defer=True)
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
    ) -> torch.Tensor | PendingNorm:
        y: torch.Tensor | PendingNorm = self.model(token_ids, positions, meta)
        return y

    def compute_logits(self, hidden: torch.Tensor | PendingNorm) -> torch.Tensor:
        # hidden: [num_seqs, hidden], or one row's pending final norm -> [num_seqs, vocab_size] float32
        logits: torch.Tensor = self.lm_head(hidden)
        return logits.float()

    def kv_layers(self) -> list[Attention]:
        return [layer.self_attn.attn for layer in self.model.layers]  # type: ignore[union-attr,misc]
