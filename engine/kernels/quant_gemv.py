# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""y = x @ dequantize(Wq, scale)^T (+ bias) for a few rows of x, with FP8 E4M3 or INT8 weights.

The decode GEMM streams its weight once, so storing it in one byte instead of two halves its
time — if enough of the GPU is streaming. The launch is ``skinny_gemm``'s: each program owns
``block_n`` rows of Wq and one of ``split_k`` slices of K, and walks its slice ``block_k``
columns at a time; split partials are summed in fixed order by ``skinny_gemm.sum_splits``. The
quantized tile is converted to float32 (exact: E4M3 and int8 values are bf16 values) and either
multiplied and summed per row (one row; INT8 as ``CudaTuning.int8_convert`` says,
``engine.kernels.int8``; the row may be attention's split partials, merged as they load:
``split_merge``) or cast to x's dtype for a tensor-core dot (2..16 rows; there the
compiler already turns int8 into bf16 pairs without the int-to-float instruction);
the product is scaled by the tile's scale, one per output row and K group
(``engine.quantization.tensors``). More than 16 rows (decode batches; the fused step's
``CudaTuning.quant_gemv_max_rows``) take a third grid axis of ``block_m``-row blocks, each
streaming Wq again (from L2 when the blocks of one column tile run together)::

    Wq [N, K]        fp8 / int8      program (j, s, i) reads Wq[j*BN : (j+1)*BN, s*KS : (s+1)*KS]
    scale [N, G]     float32         G = 1 (per channel: applied once, after the K loop)
                                     or ceil(K / group) (block_k divides group)
    x [M, K]         bf16/fp16/fp32  program (j, s, i) reads rows i*BM : (i+1)*BM

One launch per GEMM, like the bf16 path's cuBLAS call: the alternative for these row counts,
``torch._scaled_mm``, needs the activations quantized first (more launches than the FP8 weight
saves on a decode step), and INT8 has no such path.

No atomics: results are deterministic and the grid depends only on shapes, so calls can be
captured in a CUDA graph. Under programmatic dependent launch the first Wq tile streams before
the wait for the kernel ahead (``engine.kernels.pdl``).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from engine.kernels.int8 import int8_to_float
from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.kernels.skinny_gemm import SkinnyGemmConfig, SplitKPartials, _load_x, sum_splits
from engine.kernels.split_merge import PendingMerge, merge_splits
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = [
    "quant_gemv",
    "quant_gemv_config",
    "quant_gemv_deferred",
    "quant_gemv_fits",
]

_MIN_GROUP = 128
"""The narrowest scale group taken: block_k divides the group, and narrower K steps stream poorly."""


@triton.jit
def _load_wq(
    w_rows,
    kk,
    n_ok,
    k_ok,
    EVEN: tl.constexpr,
    EVICT: tl.constexpr,
    INT8_CONVERT: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    # [BN, BK] of Wq as float32. Read once per call (one row block): kept out of L2's way. No
    # ``other`` on the masked load: the interpreter cannot fill an fp8 tile; masked lanes are
    # zeroed after the cast.
    if EVEN:
        return int8_to_float(tl.load(w_rows + kk[None, :], eviction_policy=EVICT), INT8_CONVERT, INTERPRETED)
    ok = n_ok[:, None] & k_ok[None, :]
    return tl.where(
        ok,
        int8_to_float(
            tl.load(w_rows + kk[None, :], mask=ok, eviction_policy=EVICT), INT8_CONVERT, INTERPRETED
        ),
        0.0,
    )


@triton.jit
def _product(w, x_ptr, kk, k_ok, rm, m_ok, m, k, stride_xm, merge, EVEN: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_DOT: tl.constexpr, PRECISION: tl.constexpr,
             UPCAST: tl.constexpr, SILU_MUL: tl.constexpr, MERGE_SPLITS: tl.constexpr,
             HEAD_DIM: tl.constexpr):  # fmt: skip
    # [BN, BM] float32: the tile w [BN, BK] times x's rows' columns kk.
    if MERGE_SPLITS > 0:
        # One row of attention partials (split_merge), merged as loaded and rounded to the
        # activations' dtype as the merge kernel rounds; then the one-row product below.
        # merge = (lse_ptr, partials' head and split strides, lse's head stride, a pointer in the
        # activations' dtype).
        lse_ptr, stride_ph, stride_ps, stride_lh, act_ptr = merge
        xm = merge_splits(x_ptr, lse_ptr, kk // HEAD_DIM, kk % HEAD_DIM, k_ok, stride_ph, stride_ps, stride_lh,
                          MERGE_SPLITS).to(act_ptr.dtype.element_ty)  # fmt: skip
        return tl.sum(w * xm.to(tl.float32)[None, :], 1)[:, None]
    if USE_DOT:
        x_mask = m_ok[:, None] if EVEN else m_ok[:, None] & k_ok[None, :]
        x = _load_x(x_ptr, rm[:, None] * stride_xm + kk[None, :], x_mask, k, SILU_MUL)
        if UPCAST:
            return tl.dot(w, tl.trans(x.to(tl.float32)), input_precision=PRECISION)
        return tl.dot(w.to(x.dtype), tl.trans(x), input_precision=PRECISION)
    out = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for i in tl.static_range(BLOCK_M):
        row_ok = tl.full([BLOCK_K], i, tl.int32) < m
        xi = _load_x(x_ptr, i * stride_xm + kk, row_ok if EVEN else row_ok & k_ok, k, SILU_MUL)
        part = tl.sum(w * xi.to(tl.float32)[None, :], 1)  # [BN]
        out += tl.where(tl.arange(0, BLOCK_M)[None, :] == i, part[:, None], 0.0)
    return out


@triton.jit
def _group_scaled(part, s_rows, k0, group, n_ok, PER_CHANNEL: tl.constexpr):
    # The tile's product times its K group's scale; per-channel scales apply once, after the loop.
    if PER_CHANNEL:
        return part
    return part * tl.load(s_rows + k0 // group, mask=n_ok, other=0.0)[:, None]


@triton.jit
def _quant_gemv_kernel(
    x_ptr, w_ptr, s_ptr, b_ptr, y_ptr,
    m, n, k, k_per_split, group, stride_xm, stride_wn, stride_sn, stride_ys, stride_ym,
    HAS_BIAS: tl.constexpr, IS_PARTIAL: tl.constexpr, PER_CHANNEL: tl.constexpr, EVEN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, SILU_MUL: tl.constexpr,
    EVICT: tl.constexpr, INT8_CONVERT: tl.constexpr, INTERPRETED: tl.constexpr,
    lse_ptr, act_ptr, stride_ph, stride_ps, stride_lh, MERGE_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    # Row blocks on the fastest axis: the programs sharing a Wq tile run together, so it is
    # streamed from memory once and re-read from L2.
    pid_m, pid_n, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    merge = (lse_ptr, stride_ph, stride_ps, stride_lh, act_ptr)
    # This program's rows, as if they were the whole of x and y: rm, m and the loads are unchanged.
    x_ptr += pid_m * BLOCK_M * stride_xm
    y_ptr += pid_m * BLOCK_M * stride_ym
    m -= pid_m * BLOCK_M
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    n_ok, m_ok = rn < n, rm < m
    k_lo = split * k_per_split
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    s_rows = s_ptr + rn * stride_sn
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    # Weights are never written: the first tile streams while the kernel ahead finishes.
    kk = k_lo + tl.arange(0, BLOCK_K)
    k_ok = kk < k
    w = _load_wq(w_rows, kk, n_ok, k_ok, EVEN, EVICT, INT8_CONVERT, INTERPRETED)
    pdl_wait(PDL)
    part = _product(w, x_ptr, kk, k_ok, rm, m_ok, m, k, stride_xm, merge, EVEN, BLOCK_M, BLOCK_N, BLOCK_K,
                    USE_DOT, PRECISION, UPCAST, SILU_MUL, MERGE_SPLITS, HEAD_DIM)  # fmt: skip
    acc += _group_scaled(part, s_rows, k_lo, group, n_ok, PER_CHANNEL)
    # k_per_split is a multiple of BLOCK_K, so only the last step of the last split is ragged.
    for step in range(1, tl.cdiv(tl.minimum(k_per_split, k - k_lo), BLOCK_K)):
        k0 = k_lo + step * BLOCK_K
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < k
        w = _load_wq(w_rows, kk, n_ok, k_ok, EVEN, EVICT, INT8_CONVERT, INTERPRETED)
        part = _product(w, x_ptr, kk, k_ok, rm, m_ok, m, k, stride_xm, merge, EVEN, BLOCK_M, BLOCK_N, BLOCK_K,
                    USE_DOT, PRECISION, UPCAST, SILU_MUL, MERGE_SPLITS, HEAD_DIM)  # fmt: skip
        acc += _group_scaled(part, s_rows, k0, group, n_ok, PER_CHANNEL)
    if PER_CHANNEL:
        acc *= tl.load(s_rows, mask=n_ok, other=0.0)[:, None]
    mask = n_ok[:, None] & m_ok[None, :]
    if IS_PARTIAL:
        tl.store(y_ptr + split * stride_ys + rm[None, :] * stride_ym + rn[:, None], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptr + rm[None, :] * stride_ym + rn[:, None], acc.to(y_ptr.dtype.element_ty), mask=mask)


def quant_gemv_fits(x: torch.Tensor, group: int | None) -> bool:
    """Whether ``quant_gemv`` takes x (2-D, any number of rows) with scales of ``group`` columns."""
    return (
        x.dim() == 2
        and x.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and (group is None or group % _MIN_GROUP == 0)
    )


def quant_gemv_config(m: int, n: int, k: int) -> SkinnyGemmConfig:
    """The launch shape for x [m, k] @ Wq[n, k]^T, read off an H200 sweep of decode shapes
    (``bench/results/quant_gemv_sweep_h200.txt``).

    One row multiplies and sums without splitting K, but for very long rows: a split costs a
    second launch, which decode pays per layer. 2..16 rows share tensor-core shapes::

        rows   K ≥ 8192                N ≥ 16384              N ≤ 4096                other
        1      16 x 512, split 2, 8w   16 x 512, 4w           16 x 1024 (2048 when    16 x 512, 8w
                                                              K ≤ 2048), 8w
        2..16  32 x 256, split 4       32 x 256               32 x 128, split 4       32 x 128, split 4
        > 16   N ≤ 4096, K ≥ 2048: 32 x 256 over blocks of 16 rows (32 above 64 rows)
               other: 64 x 256 over blocks of 32 rows up to 32, 64 x 128 over 32 up to 64,
               over 64 up to 128, 64 x 64 over 128 above; no split (row blocks give programs)
    """
    if m == 1:
        if k >= 8192:
            return SkinnyGemmConfig(block_n=16, block_k=512, split_k=2, num_warps=8, use_dot=False)
        if n >= 16384:
            return SkinnyGemmConfig(block_n=16, block_k=512, num_warps=4, use_dot=False)
        if n <= 4096:
            return SkinnyGemmConfig(
                block_n=16, block_k=2048 if k <= 2048 else 1024, num_warps=8, use_dot=False
            )
        return SkinnyGemmConfig(block_n=16, block_k=512, num_warps=8, use_dot=False)
    if m > 16:
        if n <= 4096 and k >= 2048:  # o_proj and down: few column tiles, so narrow ones
            return SkinnyGemmConfig(block_n=32, block_k=256, block_m=16 if m <= 64 else 32)
        if m <= 32:
            return SkinnyGemmConfig(block_n=64, block_k=256, block_m=32)
        if m <= 128:
            return SkinnyGemmConfig(block_n=64, block_k=128, block_m=32 if m <= 64 else 64)
        return SkinnyGemmConfig(block_n=64, block_k=64, block_m=128)
    if n >= 16384:
        return SkinnyGemmConfig(block_n=32, block_k=256, use_dot=True)
    return SkinnyGemmConfig(block_n=32, block_k=256 if k >= 8192 else 128, split_k=4, use_dot=True)


def _merging_config(n: int, k: int, tuning: CudaTuning) -> SkinnyGemmConfig:
    # One row of attention partials (split_merge): every program re-reads its K slice's partials,
    # so skinny_gemm's merging shape, fewer and wider programs: tuning.merge_block_n rows each
    # and tuning.merge_split_k slices (None: the plain one-row GEMV's).
    plain = quant_gemv_config(1, n, k)
    return replace(plain, block_n=tuning.merge_block_n, split_k=tuning.merge_split_k or plain.split_k)


def quant_gemv(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    scale: torch.Tensor,
    group: int | None,
    bias: torch.Tensor | None = None,
    config: SkinnyGemmConfig | None = None,
    *,
    silu_mul: bool = False,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """x [m, K] @ dequantize(weight [N, K], scale [N, G])^T + bias -> [m, N] in x's dtype;
    ``group``: K columns per scale (None: one scale per row). ``silu_mul``: x is a merged
    [gate | up] row [m, 2K] and the input is silu(gate) * up, made in the loads (as
    ``skinny_gemm``'s). x may also be one token's split attention partials (``PendingMerge``;
    per-row scales), merged as they load, as ``skinny_gemm`` merges them: then the launch is
    the one-row shape with ``CudaTuning.merge_block_n`` rows a program and ``merge_split_k``
    slices. ``config`` overrides the launch shape ``quant_gemv_config`` picks."""
    y = _quant_gemv(x, weight, scale, group, bias, config, silu_mul=silu_mul, defer_sum=False, tuning=tuning)
    assert isinstance(y, torch.Tensor)  # never deferred
    return y


def quant_gemv_deferred(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    scale: torch.Tensor,
    group: int | None,
    bias: torch.Tensor | None = None,
    config: SkinnyGemmConfig | None = None,
    *,
    silu_mul: bool = False,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor | SplitKPartials:
    """``quant_gemv`` that, when its launch splits K, returns the (scaled) partials for the next
    kernel to sum (``SplitKPartials``, as ``skinny_gemm_deferred``) instead of a launch here."""
    return _quant_gemv(
        x, weight, scale, group, bias, config, silu_mul=silu_mul, defer_sum=True, tuning=tuning
    )


def _quant_gemv(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    scale: torch.Tensor,
    group: int | None,
    bias: torch.Tensor | None,
    config: SkinnyGemmConfig | None,
    *,
    silu_mul: bool,
    defer_sum: bool,
    tuning: CudaTuning,
) -> torch.Tensor | SplitKPartials:
    merge: tuple[torch.Tensor, int, int, int, int, int] | None = None
    if isinstance(x, PendingMerge):
        one_row_path = config is None or not config.use_dot
        if silu_mul or group is not None or not x.fuses_into(weight, quantized=True) or not one_row_path:
            raise ValueError(
                "attention partials fuse only into a one-row, multiply-and-sum GEMV of per-row scales"
            )
        _, _, num_parts, head_dim = x.partials.shape
        merge = (x.lse, x.partials.stride(1), x.partials.stride(2), x.lse.stride(1), num_parts, head_dim)
        x2 = x.partials
    elif not quant_gemv_fits(x, group):
        raise ValueError(
            f"quant_gemv takes 2-D half or single precision x and groups of {_MIN_GROUP}k columns"
        )
    else:
        x2 = x.contiguous()
    m = x.shape[0]
    n, k = weight.shape
    if x.shape[1] != (2 * k if silu_mul else k) or scale.shape[0] != n or scale.dtype != torch.float32:
        raise ValueError(
            f"shapes do not fit: x {tuple(x.shape)}, weight {tuple(weight.shape)}, scale {tuple(scale.shape)}"
            f" (silu_mul={silu_mul})"
        )
    config = config or (_merging_config(n, k, tuning) if merge else quant_gemv_config(m, n, k))
    block_k = config.block_k
    if group is not None:
        while group % block_k:  # a tile never straddles two scale groups
            block_k //= 2
    interpreted = x2.device.type == "cpu"  # only under TRITON_INTERPRET, whose numpy dot lacks bf16
    k_per_split = triton.cdiv(triton.cdiv(k, config.split_k), block_k) * block_k
    num_splits = triton.cdiv(k, k_per_split)
    block_m = (config.block_m or 16) if config.use_dot else triton.next_power_of_2(m)
    y = torch.empty(m, n, dtype=x.dtype, device=x2.device)
    dst = y if num_splits == 1 else torch.empty(num_splits, m, n, dtype=torch.float32, device=x2.device)
    row_blocks = triton.cdiv(m, block_m)
    lse, stride_ph, stride_ps, stride_lh, parts, head_dim = merge or (y, 0, 0, 0, 0, 1)
    _quant_gemv_kernel[(row_blocks, triton.cdiv(n, config.block_n), num_splits)](
        x2, weight, scale, bias if bias is not None else y, dst,
        m, n, k, k_per_split, k if group is None else group, x2.stride(0), weight.stride(0), scale.stride(0),
        dst.stride(0) if num_splits > 1 else 0, dst.stride(-2),
        HAS_BIAS=bias is not None, IS_PARTIAL=num_splits > 1, PER_CHANNEL=group is None,
        EVEN=n % config.block_n == 0 and k % block_k == 0 and k_per_split % block_k == 0,
        BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=block_k, USE_DOT=config.use_dot,
        PRECISION="ieee" if x.dtype == torch.float32 or interpreted else "tf32", UPCAST=interpreted,
        SILU_MUL=silu_mul, EVICT="evict_first" if row_blocks == 1 else "evict_last",
        INT8_CONVERT=tuning.int8_convert if weight.dtype == torch.int8 and not config.use_dot else "cvt",
        INTERPRETED=interpreted, lse_ptr=lse, act_ptr=y, stride_ph=stride_ph, stride_ps=stride_ps,
        stride_lh=stride_lh, MERGE_SPLITS=parts, HEAD_DIM=head_dim,
        num_warps=config.num_warps, num_stages=config.num_stages, **pdl_launch(x2, tuning.pdl),
    )  # fmt: skip
    if num_splits > 1 and defer_sum:
        return SplitKPartials(dst, bias, x.dtype)
    if num_splits > 1:
        sum_splits(dst, bias, y, pdl=tuning.pdl)
    return y
