"""Triton kernels for the CUDA path; the torch layers are their oracle.

Nothing here is imported on CPU: the fused step (``engine.fused_step``) is imported only on CUDA,
and the Triton attention backend imports a kernel only when it runs. Every kernel takes the
engine's ``CudaTuning`` (``engine.tuning``). The tests run every kernel on CPU tensors under
``TRITON_INTERPRET=1``.
"""

from engine.kernels.gumbel_argmax import gumbel_argmax
from engine.kernels.normed_gemv import PendingNorm, TokenEmbedding, normed_gemv
from engine.kernels.paged_attention import NewTokenRope, decode_attention, paged_attention
from engine.kernels.rms_norm import rms_norm, rms_norm_split_k
from engine.kernels.rotary_kv import kv_write, rotary, rotary_kv_write
from engine.kernels.silu_and_mul import silu_and_mul
from engine.kernels.skinny_gemm import (
    SkinnyGemmConfig,
    SplitKPartials,
    skinny_gemm,
    skinny_gemm_config,
    skinny_gemm_deferred,
)
from engine.kernels.split_merge import PendingMerge

__all__ = [
    "NewTokenRope",
    "PendingMerge",
    "PendingNorm",
    "SkinnyGemmConfig",
    "SplitKPartials",
    "TokenEmbedding",
    "decode_attention",
    "gumbel_argmax",
    "kv_write",
    "normed_gemv",
    "paged_attention",
    "rms_norm",
    "rms_norm_split_k",
    "rotary",
    "rotary_kv_write",
    "silu_and_mul",
    "skinny_gemm",
    "skinny_gemm_config",
    "skinny_gemm_deferred",
]
