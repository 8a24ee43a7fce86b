"""``FusedStep``: one forward step of a Llama-family model on CUDA, walking the model's layers
with their weights and running the fused Triton kernels in place of the layers' torch code.

The arithmetic is the model's (``engine.models.llama``); only which kernel computes what
differs. A decoder layer, with the lazy values that pass between its kernels at batch-1 decode::

    embed+norm ─PendingNorm─> qkv GEMM ─> attention (RoPE, KV write) ─PendingMerge─> o_proj
      ─SplitKPartials─> add+norm ─PendingNorm─> gate_up GEMM ─> down (SiLU inside)
      ─SplitKPartials─> next layer's add+norm ...  final add+norm ─PendingNorm─> LM head

Larger batches take the same route with fewer of the lazy hand-offs (``gemm``, ``norm``);
which fusions apply is the ``CudaTuning`` this step was built with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch

from engine.attention_backends import AttentionMetadata, TritonAttentionBackend
from engine.fused_step import gemm
from engine.fused_step.attention import rope_attention
from engine.fused_step.lazy import materialize
from engine.fused_step.norm import add_norm, embed_norm, norm
from engine.kernels import PendingNorm, SplitKPartials, normed_gemv, silu_and_mul
from engine.kernels.normed_gemv import ONE_TILE_MAX_K
from engine.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP
from engine.tuning import CudaTuning

__all__ = ["FusedStep", "Hidden"]

Hidden = torch.Tensor | PendingNorm
"""The step's last hidden state: [num_tokens, hidden], or one row's final norm left to the LM head."""


class FusedStep:
    def __init__(self, model: LlamaForCausalLM, tuning: CudaTuning) -> None:
        self.model = model
        self.tuning = tuning
        self.attention = TritonAttentionBackend(tuning)
        body = model.model
        if body.embed_tokens is None or body.norm is None:
            raise ValueError("the fused step runs whole models, not one pipeline stage")
        self.embed_tokens, self.norm = body.embed_tokens, body.norm

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> Hidden:
        # token_ids, positions: [num_tokens] -> [num_tokens, hidden] (or one row's pending norm)
        body, t = self.model.model, self.tuning
        if not body.layers:
            return norm(self.norm, self.embed_tokens(token_ids), t)
        first, *rest = cast("list[LlamaDecoderLayer]", list(body.layers))
        h, residual = embed_norm(self.embed_tokens, first.input_layernorm, token_ids, t)
        x, residual = self._decoder_layer(first, positions, h, residual, meta)
        for layer in rest:
            h, residual = add_norm(layer.input_layernorm, x, residual, t)
            x, residual = self._decoder_layer(layer, positions, h, residual, meta)
        hidden, _ = add_norm(self.norm, x, residual, t)
        return hidden

    def logits(
        self, hidden: Hidden, rows: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """[num_rows, vocab_size] float32 logits. ``rows`` picks the rows that sample from a hidden
        tensor (a pending norm is a single row, already the one)."""
        head, t = self.model.lm_head, self.tuning
        if isinstance(hidden, PendingNorm):
            if t.final_norm_in_lm_head and head.tp_size == 1 and gemm.fuses_into(hidden, head.weight, t):
                one_tile = head.weight.shape[1] <= ONE_TILE_MAX_K  # else the long-row shape
                return normed_gemv(
                    hidden,
                    head.weight,
                    out_dtype=torch.float32,
                    block_n=t.lm_head_block_n if one_tile else None,
                    num_warps=t.lm_head_warps if one_tile else None,
                    tuning=t,
                )
            hidden = materialize(hidden, t)
        elif rows is not None:
            hidden = rows(hidden)
        logits: torch.Tensor = head(hidden)
        return logits.float()

    def _decoder_layer(
        self,
        layer: LlamaDecoderLayer,
        positions: torch.Tensor,
        h: torch.Tensor | PendingNorm,
        residual: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor | SplitKPartials, torch.Tensor]:
        # h: this layer's normed input; residual: the stream -> (MLP output, residual stream)
        attn = self._attention(layer.self_attn, positions, h, meta)
        h, residual = add_norm(layer.post_attention_layernorm, attn, residual, self.tuning)
        return self._mlp(layer.mlp, h), residual

    def _attention(
        self,
        attn: LlamaAttention,
        positions: torch.Tensor,
        h: torch.Tensor | PendingNorm,
        meta: AttentionMetadata,
    ) -> torch.Tensor | SplitKPartials:
        # h: [num_tokens, hidden] -> o_proj's output, or its split-K partials
        q_size, kv_size = attn.num_heads * attn.head_dim, attn.num_kv_heads * attn.head_dim
        q, k, v = gemm.column(attn.qkv_proj, h, self.tuning).split([q_size, kv_size, kv_size], dim=-1)  # type: ignore[no-untyped-call]
        q = q.view(-1, attn.num_heads, attn.head_dim)
        k = k.view(-1, attn.num_kv_heads, attn.head_dim)
        v = v.view(-1, attn.num_kv_heads, attn.head_dim)
        qk_norm = None
        if attn.q_norm is not None and attn.k_norm is not None:
            qk_norm = (attn.q_norm.weight, attn.k_norm.weight, attn.q_norm.eps)
        out = rope_attention(
            self.attention, attn.attn, positions, q, k, v, meta, inv_freq=attn.rotary_emb.inv_freq,
            qk_norm=qk_norm, defer_merge=self.tuning.merge_in_gemm and meta.num_seqs == 1,
        )  # fmt: skip
        return gemm.row_deferred(
            attn.o_proj, out.flatten(1) if isinstance(out, torch.Tensor) else out, self.tuning
        )

    def _mlp(self, mlp: LlamaMLP, h: torch.Tensor | PendingNorm) -> torch.Tensor | SplitKPartials:
        # h: [num_tokens, hidden] -> down's output, or its split-K partials
        gate_up = gemm.column(mlp.gate_up_proj, h, self.tuning)
        if gemm.is_skinny(gate_up, self.tuning):  # SiLU-and-mul inside the down projection
            return gemm.silu_mul_down(mlp.down_proj, gate_up, self.tuning)
        return gemm.row(mlp.down_proj, silu_and_mul(gate_up, tuning=self.tuning), self.tuning)
