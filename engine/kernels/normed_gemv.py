# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""RMSNorm, with the residual add before it, fused into the one-row GEMM after it (batch-1 decode).

At one sequence a decode step is a chain of some 230 small kernels, and each link costs a round
trip through memory and a grid boundary whatever its size. Each decoder layer has two links of
the form ``GEMM -> add + RMSNorm -> GEMM``; here the second GEMM computes the norm itself::

    before:  o_proj -> [partials] -> add+norm -> [h, residual'] -> gate_up
    after:   o_proj -> [partials] -> gate_up (every program: h = norm(sum(partials) + residual);
                                              program 0 also stores residual' = sum + residual)

The first layer's norm has no residual add: its programs gather the token's embedding row
themselves (``TokenEmbedding``), so at one token no embedding or norm kernel runs before the qkv
GEMM. Every program recomputes the row's norm (from L2) and multiplies its ``BLOCK_N`` rows of W.
A row of at most ``ONE_TILE_MAX_K`` values is one register tile, with the program's whole W tile
loaded before ``pdl_wait``. A longer row (Llama-3-8B: 4,096) is walked in chunks, twice::

    pass 1  for each chunk: x = sum(partials) + bias + residual, rounded   sum of squares (fp32)
            (program 0 stores x: the next residual stream)
    pass 2  for each chunk: x again, normed and rounded as rms_norm        y += W chunk . h chunk

with W's first chunk loaded before the wait. The rounding is rms_norm's then skinny_gemm's (one
row), so results are those of the two kernels; the chunked row sums its squares chunk-wise, in
another order than rms_norm's one tile (last float32 bits of the norm's scale), and its product
chunk by chunk as a one-row skinny GEMM of ``block_k`` = the chunk does. Each program re-reads
the row, so long rows take wider programs (``CudaTuning.long_row_block_n``).
``PendingNorm`` is the norm not yet computed; a consumer that cannot fuse it gets the norm
kernel's output instead (``engine.fused_step.lazy.materialize``). Which rows are fused at all is
the fused step's choice (``CudaTuning.norm_in_gemv_max_k``).

FP8 / INT8 weights with one scale per output row (``engine.quantization``) fuse the same way:
the tile is widened to float32 (exact), and the row's sum is multiplied by its scale before the
bias, as ``quant_gemv``'s one-row launch does — so a quantized model keeps the norm fusions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.int8 import int8_to_float
from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.kernels.skinny_gemm import SplitKPartials, add_splits
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = ["ONE_TILE_MAX_K", "PendingNorm", "TokenEmbedding", "normed_gemv"]

ONE_TILE_MAX_K = 1024
"""Longest row taken as one tile: the row and a program's W tile stay in registers (8 warps).
Longer rows are walked in ``CudaTuning.long_row_chunk``-column chunks."""

_QUANTIZED = (torch.float8_e4m3fn, torch.int8)


@dataclass(frozen=True)
class TokenEmbedding:
    """``weight[token_ids]`` for one token, gathered by the kernel that consumes it: the first
    layer's norm at one decode row reads its input row straight from the embedding table."""

    weight: torch.Tensor
    """[vocab, n]."""
    token_ids: torch.Tensor
    """[1] int64."""


@dataclass(frozen=True)
class PendingNorm:
    """``rms_norm(x + residual) * weight`` for one row, left to the GEMM that consumes it."""

    x: torch.Tensor | SplitKPartials | TokenEmbedding
    """[1, n]: the previous layer's output, its GEMM's split-K partials, or (first layer) the
    token whose embedding row it is."""
    residual: torch.Tensor | None
    """[1, n]; None in the first layer, where x itself is the residual stream."""
    weight: torch.Tensor
    eps: float
    residual_out: torch.Tensor
    """[1, n]: receives x + residual (the next residual stream) from whichever kernel computes it."""

    def fuses_into(self, weight: torch.Tensor, *, quantized: bool = False) -> bool:
        """Whether ``normed_gemv`` takes this norm into a GEMM with ``weight`` [n_out, n];
        ``quantized``: an FP8 / INT8 weight with per-row scales."""
        out, x = self.residual_out, self.x
        n = out.shape[-1]
        return (
            out.shape[0] == 1
            and out.is_contiguous()
            and (self.residual is None or self.residual.is_contiguous())
            and (
                not isinstance(x, TokenEmbedding) or (x.weight.dtype == out.dtype and x.weight.stride(1) == 1)
            )
            and weight.shape[1] == n
            and (weight.dtype in _QUANTIZED if quantized else weight.dtype == out.dtype)
            and weight.stride(1) == 1
        )


@triton.jit
def _row(x_ptr, tok_ptr, res_ptr, x_bias_ptr, kk, k_ok, stride_part, num_parts, dtype: tl.constexpr,
         PARTS: tl.constexpr, GATHER: tl.constexpr, HAS_RES: tl.constexpr, X_HAS_BIAS: tl.constexpr):  # fmt: skip
    # Columns kk of x + residual, rounded to the activations' dtype as rms_norm rounds them.
    if GATHER:  # the token's embedding row (stride_part: the table's row stride)
        tok = tl.load(tok_ptr).to(tl.int64)
        x = tl.load(x_ptr + tok * stride_part + kk, mask=k_ok, other=0.0)
    elif PARTS > 0:  # summed as rms_norm_split_k sums them
        acc = add_splits(x_ptr, kk, k_ok, num_parts, stride_part, PARTS)
        if X_HAS_BIAS:
            acc += tl.load(x_bias_ptr + kk, mask=k_ok, other=0.0).to(tl.float32)
        x = acc.to(dtype)
    else:
        x = tl.load(x_ptr + kk, mask=k_ok, other=0.0)
    if HAS_RES:
        r = tl.load(res_ptr + kk, mask=k_ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(dtype)
    return x


@triton.jit
def _load_w(w_ptr, rn, kk, n_ok, k_ok, stride_wn, SCALED: tl.constexpr, INT8_CONVERT: tl.constexpr,
            INTERPRETED: tl.constexpr):  # fmt: skip
    # [BLOCK_N, BLOCK_K] of W (FP8 / INT8 widened to float32, exact: INT8 as CudaTuning.int8_convert
    # says, as quant_gemv's one row). W is read once: kept out of L2.
    mask = n_ok[:, None] & k_ok[None, :]
    ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_wn + kk[None, :]
    # One return: the compiler types every return of a helper alike, taken or not.
    if SCALED:  # no ``other``: the interpreter cannot fill an fp8 tile; zeroed after the cast
        raw = tl.load(ptrs, mask=mask, eviction_policy="evict_first")
        w = tl.where(mask, int8_to_float(raw, INT8_CONVERT, INTERPRETED), 0.0)
    else:
        w = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    return w


@triton.jit
def _normed(x, rstd, norm_w, dtype: tl.constexpr):
    # rms_norm's two roundings: x * rstd to the dtype, times the norm weight to the dtype; as float32.
    h = (x.to(tl.float32) * rstd).to(dtype).to(tl.float32) * norm_w
    return h.to(dtype).to(tl.float32)


@triton.jit
def _normed_gemv_kernel(
    x_ptr, tok_ptr, res_ptr, norm_w_ptr, res_out_ptr, x_bias_ptr, w_ptr, s_ptr, b_ptr, y_ptr,
    n, k, stride_part, num_parts, stride_wn, stride_sn, eps,
    PARTS: tl.constexpr, GATHER: tl.constexpr, HAS_RES: tl.constexpr, X_HAS_BIAS: tl.constexpr,
    HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CHUNKED: tl.constexpr, INT8_CONVERT: tl.constexpr, INTERPRETED: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    # One tile (CHUNKED off): BLOCK_K covers the row. Chunked: BLOCK_K columns per loop step.
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    n_ok, k_ok = rn < n, kk < k
    dtype = res_out_ptr.dtype.element_ty
    # Weights before the wait (the first chunk's, or the whole tile): they stream in while the
    # kernel ahead finishes.
    w = _load_w(w_ptr, rn, kk, n_ok, k_ok, stride_wn, SCALED, INT8_CONVERT, INTERPRETED)
    norm_w = tl.load(norm_w_ptr + kk, mask=k_ok, other=0.0).to(tl.float32)
    pdl_wait(PDL)
    if CHUNKED:
        # Pass 1: the row's sum of squares; program 0 stores the residual stream.
        sq = tl.zeros([BLOCK_K], dtype=tl.float32)
        for k0 in range(0, k, BLOCK_K):
            cols = k0 + kk
            ok = cols < k
            x = _row(x_ptr, tok_ptr, res_ptr, x_bias_ptr, cols, ok, stride_part, num_parts, dtype, PARTS,
                     GATHER, HAS_RES, X_HAS_BIAS)  # fmt: skip
            if pid == 0:
                tl.store(res_out_ptr + cols, x, mask=ok)
            xf = x.to(tl.float32)
            sq += xf * xf
        rstd = tl.rsqrt(tl.sum(sq, 0) / k + eps)
        # Pass 2: the row again (from L2), normed, times W chunk by chunk; each chunk's products
        # summed, then added, as the one-row skinny GEMM walks K.
        x = _row(x_ptr, tok_ptr, res_ptr, x_bias_ptr, kk, k_ok, stride_part, num_parts, dtype, PARTS, GATHER,
                 HAS_RES, X_HAS_BIAS)  # fmt: skip
        y = tl.sum(w.to(tl.float32) * _normed(x, rstd, norm_w, dtype)[None, :], 1)
        for k0 in range(BLOCK_K, k, BLOCK_K):
            cols = k0 + kk
            ok = cols < k
            w = _load_w(w_ptr, rn, cols, n_ok, ok, stride_wn, SCALED, INT8_CONVERT, INTERPRETED)
            x = _row(x_ptr, tok_ptr, res_ptr, x_bias_ptr, cols, ok, stride_part, num_parts, dtype, PARTS,
                     GATHER, HAS_RES, X_HAS_BIAS)  # fmt: skip
            norm_w = tl.load(norm_w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
            y += tl.sum(w.to(tl.float32) * _normed(x, rstd, norm_w, dtype)[None, :], 1)
    else:
        x = _row(x_ptr, tok_ptr, res_ptr, x_bias_ptr, kk, k_ok, stride_part, num_parts, dtype, PARTS, GATHER,
                 HAS_RES, X_HAS_BIAS)  # fmt: skip
        if pid == 0:
            tl.store(res_out_ptr + kk, x, mask=k_ok)
        xf = x.to(tl.float32)
        h = _normed(x, tl.rsqrt(tl.sum(xf * xf, 0) / k + eps), norm_w, dtype)
        y = tl.sum(w.to(tl.float32) * h[None, :], 1)  # [BLOCK_N], as skinny_gemm's one row
    if SCALED:
        y *= tl.load(s_ptr + rn * stride_sn, mask=n_ok, other=0.0)
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)
    # Rounded to the activations' dtype even when stored wider (logits: as F.linear then .float()).
    tl.store(y_ptr + rn, y.to(dtype).to(y_ptr.dtype.element_ty), mask=n_ok)


def normed_gemv(
    pending: PendingNorm,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """``F.linear(pending.materialize(), weight, bias)`` in one kernel; also fills
    ``pending.residual_out``. Needs ``pending.fuses_into(weight)``. Returns [1, n_out], in
    ``out_dtype`` if given (the result rounded to the activations' dtype, then widened).
    ``scale``: [n_out, 1] float32 per-row scales of an FP8 / INT8 ``weight``.
    ``block_n`` and ``num_warps`` override the tuning's program shape: ``gemv_block_n`` and
    ``gemv_warps`` for a row of at most ``ONE_TILE_MAX_K``, else ``long_row_block_n`` and
    ``long_row_warps`` (walking ``long_row_chunk`` columns at a time)."""
    if scale is not None and (
        scale.dtype != torch.float32 or scale.shape[0] != weight.shape[0] or scale.numel() != weight.shape[0]
    ):
        raise ValueError(
            f"per-row scales [{weight.shape[0]}, 1] float32 expected, got {tuple(scale.shape)} {scale.dtype}"
        )
    if not pending.fuses_into(weight, quantized=scale is not None):
        raise ValueError(
            f"cannot fuse a norm of {tuple(pending.residual_out.shape)} into weight {tuple(weight.shape)}"
        )
    out = pending.residual_out
    n_out, k = weight.shape
    y = torch.empty(1, n_out, dtype=out_dtype or out.dtype, device=out.device)
    x, tokens = pending.x, None
    if isinstance(x, SplitKPartials):
        x_ptr, stride_part, num_parts, x_bias = x.partials, x.partials.stride(0), x.partials.shape[0], x.bias
    elif isinstance(x, TokenEmbedding):
        x_ptr, stride_part, num_parts, x_bias, tokens = x.weight, x.weight.stride(0), 0, None, x.token_ids
    else:
        x_ptr, stride_part, num_parts, x_bias = x.contiguous(), 0, 0, None
    residual = pending.residual
    chunked = k > ONE_TILE_MAX_K
    if chunked:
        block_n, block_k = block_n or tuning.long_row_block_n, tuning.long_row_chunk
        num_warps = num_warps or tuning.long_row_warps
    else:
        block_n, block_k = block_n or tuning.gemv_block_n, triton.next_power_of_2(k)
        num_warps = num_warps or tuning.gemv_warps
    _normed_gemv_kernel[(triton.cdiv(n_out, block_n),)](
        x_ptr, tokens if tokens is not None else y, residual if residual is not None else out,
        pending.weight, out,
        x_bias if x_bias is not None else y, weight, scale if scale is not None else y,
        bias if bias is not None else y, y,
        n_out, k, stride_part, num_parts, weight.stride(0), scale.stride(0) if scale is not None else 0, pending.eps,
        PARTS=triton.next_power_of_2(num_parts) if num_parts else 0, GATHER=tokens is not None,
        HAS_RES=residual is not None, X_HAS_BIAS=x_bias is not None, HAS_BIAS=bias is not None,
        SCALED=scale is not None, BLOCK_N=block_n, BLOCK_K=block_k, CHUNKED=chunked,
        INT8_CONVERT=tuning.int8_convert if weight.dtype == torch.int8 else "cvt",
        INTERPRETED=weight.device.type == "cpu", num_warps=num_warps,
        **pdl_launch(out, tuning.pdl),
    )  # fmt: skip
    return y
