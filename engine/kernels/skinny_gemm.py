# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""y = x @ W^T (+ bias) for a few rows of x, in Triton: a weight-streaming GEMM for decode.

With 1..16 rows the matmul reads each weight byte once and does almost no arithmetic per byte,
so its time is the weight's size over memory bandwidth — if enough of the GPU is streaming. Each
program owns ``block_n`` rows of W (output columns) and one of ``split_k`` slices of K, and walks
its slice ``block_k`` columns at a time; every load is ``block_k`` contiguous elements of a W row::

    W [N, K]   program (j, s) reads W[j*BN : (j+1)*BN, s*KS : (s+1)*KS] in [BN, BK] tiles
    x [M, K]   the same x columns, [M padded, BK], from L2: x is tiny
    y [M, N]   split_k == 1: y[:, j*BN : (j+1)*BN] = acc + bias, rounded once to x's dtype
               split_k  > 1: fp32 partials [split_k, M, N], summed in fixed order by a second
                             kernel that adds the bias and rounds once

The second pass, not atomics, so results are deterministic. Rows never mix, so a row's result
depends on the configuration, not on the other rows: batches of 2..16 rows share one
configuration and agree bit for bit (one row takes a faster, differently rounded path).
Accumulation is float32 throughout. The grid depends only on shapes, so calls can be captured
in a CUDA graph; the split buffer is allocated by shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.pdl import pdl_launch, pdl_wait
from engine.kernels.split_merge import PendingMerge, merge_splits
from engine.tuning import DEFAULT_TUNING, CudaTuning

__all__ = [
    "SkinnyGemmConfig",
    "SplitKPartials",
    "skinny_gemm",
    "skinny_gemm_config",
    "skinny_gemm_deferred",
    "sum_splits",
]


@dataclass(frozen=True)
class SplitKPartials:
    """A skinny GEMM's result before its split-K sum: ``y = round(sum(partials) + bias)``.

    Handed to the kernel that consumes y next (``rms_norm`` with a residual), which sums the
    partials in the same fixed order as ``_split_sum_kernel``: one launch fewer, same bits.
    """

    partials: torch.Tensor
    """[splits, m, n] float32."""
    bias: torch.Tensor | None
    dtype: torch.dtype
    """y's dtype (the activations')."""

    @property
    def shape(self) -> tuple[int, int]:
        return self.partials.shape[1], self.partials.shape[2]


@dataclass(frozen=True)
class SkinnyGemmConfig:
    """One launch shape; ``skinny_gemm_config`` picks it, a sweep passes its own."""

    block_n: int = 32
    """Rows of W (output columns) per program, a power of two (≥ 16 with ``use_dot``)."""
    block_k: int = 256
    """Columns of W per loop step, a power of two ≥ 16: each W row chunk is one contiguous read."""
    split_k: int = 1
    """Programs sharing one column block's K; above 1 a second kernel sums their partials."""
    use_dot: bool = True
    """``tl.dot`` on tensor cores with rows padded to 16; otherwise one multiply-and-sum per row."""
    num_warps: int = 4
    """Warps per program."""
    num_stages: int = 3
    """Software-pipelining depth of the W loads."""
    block_m: int | None = None
    """Rows of x per program of a multi-row quantized GEMV (``quant_gemv``); None: all rows in one,
    padded to 16 with ``use_dot``."""

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k", "num_warps", "block_m"):
            value = getattr(self, name)
            if value is not None and (value < 1 or value & (value - 1)):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if self.block_k < 16 or (self.use_dot and self.block_n < 16):
            raise ValueError("block_k (and block_n with use_dot) must be at least 16")
        if self.split_k < 1 or self.num_stages < 1:
            raise ValueError("split_k and num_stages must be positive")


@triton.jit
def _load_w(w_rows, kk, n_ok, k_ok, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr):
    # [BN, BK] of W; W is read once per call, so keep it out of L2's way.
    if EVEN_N and EVEN_K:
        return tl.load(w_rows + kk[None, :], eviction_policy="evict_first")
    elif EVEN_K:
        return tl.load(w_rows + kk[None, :], mask=n_ok[:, None], other=0.0, eviction_policy="evict_first")
    else:
        return tl.load(w_rows + kk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0,
                       eviction_policy="evict_first")  # fmt: skip


@triton.jit
def _load_x(x_ptr, offsets, mask, k, SILU_MUL: tl.constexpr):
    # x, or silu(gate) * up read from a merged [gate | up] row (rounded as silu_and_mul rounds).
    if SILU_MUL:
        gate = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        up = tl.load(x_ptr + k + offsets, mask=mask, other=0.0)
        g = gate.to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
        return (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype)
    else:
        return tl.load(x_ptr + offsets, mask=mask, other=0.0)


@triton.jit
def _accumulate(acc, w, x_ptr, kk, k_ok, rm, m_ok, pid_m, m, k, stride_xm, merge,
                EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, USE_DOT: tl.constexpr,
                PRECISION: tl.constexpr, UPCAST: tl.constexpr, SILU_MUL: tl.constexpr,
                MERGE_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    if MERGE_SPLITS > 0:
        # One row of attention partials (split_merge): merged as loaded, rounded as the merge
        # kernel rounds. merge = (lse_ptr, partials' head and split strides, lse's head stride).
        lse_ptr, stride_ph, stride_ps, stride_lh = merge
        xm = merge_splits(x_ptr, lse_ptr, kk // HEAD_DIM, kk % HEAD_DIM, k_ok, stride_ph, stride_ps, stride_lh,
                          MERGE_SPLITS).to(w.dtype)  # fmt: skip
        acc += tl.sum(w.to(tl.float32) * xm.to(tl.float32)[None, :], 1)[:, None]
    elif USE_DOT:
        x_mask = m_ok[:, None] if EVEN_K else m_ok[:, None] & k_ok[None, :]
        x = _load_x(x_ptr, rm[:, None] * stride_xm + kk[None, :], x_mask, k, SILU_MUL)
        if UPCAST:
            w, x = w.to(tl.float32), x.to(tl.float32)
        acc += tl.dot(w, tl.trans(x), input_precision=PRECISION)  # [BN, BM]
    else:
        wf = w.to(tl.float32)
        for i in tl.static_range(BLOCK_M):
            row = pid_m * BLOCK_M + i
            row_ok = tl.full([BLOCK_K], row, tl.int32) < m
            xi = _load_x(x_ptr, row * stride_xm + kk, row_ok if EVEN_K else row_ok & k_ok, k, SILU_MUL)
            part = tl.sum(wf * xi.to(tl.float32)[None, :], 1)  # [BN]
            acc += tl.where(tl.arange(0, BLOCK_M)[None, :] == i, part[:, None], 0.0)
    return acc


@triton.jit
def _skinny_gemm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    m, n, k, k_per_split, stride_xm, stride_wn, stride_ys, stride_ym,
    HAS_BIAS: tl.constexpr, IS_PARTIAL: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, SILU_MUL: tl.constexpr,
    lse_ptr, stride_ph, stride_ps, stride_lh, MERGE_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    merge = (lse_ptr, stride_ph, stride_ps, stride_lh)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok, m_ok = rn < n, rm < m
    k_lo = split * k_per_split
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn  # [BN, 1]
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    # The first W tile is loaded before waiting for the kernel before: weights are never written,
    # so under programmatic dependent launch their first bytes stream while that kernel finishes.
    kk = k_lo + tl.arange(0, BLOCK_K)
    k_ok = kk < k
    w = _load_w(w_rows, kk, n_ok, k_ok, EVEN_N, EVEN_K)
    pdl_wait(PDL)
    acc = _accumulate(acc, w, x_ptr, kk, k_ok, rm, m_ok, pid_m, m, k, stride_xm, merge,
                      EVEN_K, BLOCK_M, BLOCK_K, USE_DOT, PRECISION, UPCAST, SILU_MUL, MERGE_SPLITS, HEAD_DIM)  # fmt: skip
    # k_per_split is a multiple of BLOCK_K, so only the last step of the last split is ragged.
    for step in range(1, tl.cdiv(tl.minimum(k_per_split, k - k_lo), BLOCK_K)):
        kk = k_lo + step * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = kk < k
        w = _load_w(w_rows, kk, n_ok, k_ok, EVEN_N, EVEN_K)
        acc = _accumulate(acc, w, x_ptr, kk, k_ok, rm, m_ok, pid_m, m, k, stride_xm, merge,
                          EVEN_K, BLOCK_M, BLOCK_K, USE_DOT, PRECISION, UPCAST, SILU_MUL, MERGE_SPLITS,
                          HEAD_DIM)  # fmt: skip
    mask = n_ok[:, None] & m_ok[None, :]
    if IS_PARTIAL:
        dst = y_ptr + split * stride_ys + rm[None, :] * stride_ym + rn[:, None]
        tl.store(dst, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptr + rm[None, :] * stride_ym + rn[:, None], acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_splits(ptr, offsets, mask, num_splits, stride_split, SPLITS: tl.constexpr):
    """The sum over splits of the float32 partials at ``ptr + s * stride_split + offsets``, one
    split at a time from the first. ``tl.sum`` over a [SPLITS, BLOCK] tile is not a fixed order:
    its tree follows how the compiler lays the tile over threads, which differs between kernels
    of other block sizes (three splits of a 4,096 row: fused and unfused residuals one bit apart
    on the H200). Every reader of ``SplitKPartials`` sums through this, so they round alike."""
    acc = tl.load(ptr + offsets, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITS):
        ok = mask & (offsets * 0 + s < num_splits)  # a tensor compare: one mask dtype everywhere
        acc += tl.load(ptr + s * stride_split + offsets, mask=ok, other=0.0)
    return acc


@triton.jit
def _split_sum_kernel(
    part_ptr, b_ptr, y_ptr, n, num_splits, stride_ps, stride_pm, stride_ym,
    HAS_BIAS: tl.constexpr, SPLITS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_wait(PDL)
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = add_splits(part_ptr + row * stride_pm, cols, cols < n, num_splits, stride_ps, SPLITS)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, acc.to(y_ptr.dtype.element_ty), mask=cols < n)


def sum_splits(partials: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, *, pdl: bool) -> None:
    """y [m, n] = round(sum over splits of partials [splits, m, n] + bias), in a fixed order."""
    num_splits, m, n = partials.shape
    block = min(1024, triton.next_power_of_2(n))
    _split_sum_kernel[(triton.cdiv(n, block), m)](
        partials, bias if bias is not None else y, y, n, num_splits, partials.stride(0), partials.stride(1),
        y.stride(0), HAS_BIAS=bias is not None, SPLITS=triton.next_power_of_2(num_splits), BLOCK=block,
        **pdl_launch(partials, pdl),
    )  # fmt: skip


def skinny_gemm_config(
    m: int,
    n: int,
    k: int,
    *,
    block_n: int | None = None,
    split_k: int | None = None,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> SkinnyGemmConfig:
    """The launch shape for x [m, k] @ W[n, k]^T, read off an H200 sweep of decode shapes (bf16).

    A narrow W (N ≤ 4096) with long rows (K ≥ 2048) splits K in four, so some 256 programs
    stream it. One row takes the multiply-and-sum path; 2..16 rows share one tensor-core
    configuration (``block_n`` x ``block_k``)::

        rows   N ≤ 4096, K ≥ 2048         other N < 16384    16384 ≤ N < 65536   N ≥ 65536
        1      16 x 256, split 4          16 x 512           16 x 512            16 x 512
               (one-row width and split: tuning.one_row_block_n, one_row_split_k)
        2..16  64 x 256, split 4          64 x 256           32 x 128            64 x 128
               (64 x 128 when K ≥ 4096)

    With ``tuning.prefetch_whole_slice`` one row below 64 Ki columns takes its K slice as one tile of up
    to 1,024 columns (eight warps): a step of a small model is a chain of such GEMMs, and a tile
    loaded before ``pdl_wait`` is memory latency the chain does not wait for. ``block_n`` and
    ``split_k`` override that one-row shape's (a GEMM that merges attention partials as it loads
    them wants fewer, wider programs: ``split_merge``).
    """
    if split_k is None:
        split_k = (tuning.one_row_split_k if m == 1 else 4) if n <= 4096 and k >= 2048 else 1
    if m == 1:
        if tuning.prefetch_whole_slice and n < 65536 and k // split_k <= 1024:
            block_k = min(1024, triton.next_power_of_2(triton.cdiv(k, split_k)))
            return SkinnyGemmConfig(
                block_n=block_n or tuning.one_row_block_n,
                block_k=block_k,
                split_k=split_k,
                use_dot=False,
                num_warps=tuning.one_row_warps,
            )
        return SkinnyGemmConfig(
            block_n=block_n or 16, block_k=256 if split_k > 1 else 512, split_k=split_k, use_dot=False
        )
    block_n = 32 if 16384 <= n < 65536 else 64
    block_k = 128 if n >= 16384 or (split_k > 1 and k >= 4096) else 256
    return SkinnyGemmConfig(block_n=block_n, block_k=block_k, split_k=split_k)


def skinny_gemm(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: SkinnyGemmConfig | None = None,
    *,
    silu_mul: bool = False,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """F.linear for few rows: x [..., k] @ weight[n, k]^T + bias[n] -> [..., n] in x's dtype.

    ``silu_mul``: x is a merged [gate | up] row [..., 2k] and the input is silu(gate) * up, made
    on the fly (SwiGLU's activation fused into the down projection; no [..., k] tensor written).
    x may also be one token's split attention partials (``PendingMerge``), merged as they load.
    ``config`` overrides the launch shape ``skinny_gemm_config`` picks under ``tuning``.
    """
    y = _skinny_gemm(x, weight, bias, config, silu_mul=silu_mul, defer_sum=False, tuning=tuning)
    assert isinstance(y, torch.Tensor)  # never deferred
    return y


def skinny_gemm_deferred(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: SkinnyGemmConfig | None = None,
    *,
    silu_mul: bool = False,
    tuning: CudaTuning = DEFAULT_TUNING,
) -> torch.Tensor | SplitKPartials:
    """``skinny_gemm`` for 2-D x that, when its launch splits K, returns the partials
    (``SplitKPartials``) for the next kernel to sum instead of summing them in a launch here."""
    if isinstance(x, torch.Tensor) and x.dim() != 2:
        raise ValueError("skinny_gemm_deferred takes 2-D x")
    return _skinny_gemm(x, weight, bias, config, silu_mul=silu_mul, defer_sum=True, tuning=tuning)


def _skinny_gemm(
    x: torch.Tensor | PendingMerge,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    config: SkinnyGemmConfig | None,
    *,
    silu_mul: bool,
    defer_sum: bool,
    tuning: CudaTuning,
) -> torch.Tensor | SplitKPartials:
    if x.dtype != weight.dtype or (bias is not None and bias.dtype != x.dtype):
        raise ValueError(f"skinny_gemm needs one dtype, got {x.dtype}, {weight.dtype}")
    n, k = weight.shape
    if x.shape[-1] != (2 * k if silu_mul else k):
        raise ValueError(
            f"x {tuple(x.shape)} does not fit weight {tuple(weight.shape)} (silu_mul={silu_mul})"
        )
    out_shape = (*x.shape[:-1], n)
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    merge: tuple[torch.Tensor, int, int, int, int, int] | None = None
    if isinstance(x, PendingMerge):
        if silu_mul or not x.fuses_into(weight) or (config is not None and config.use_dot):
            raise ValueError("attention partials fuse only into a one-row, multiply-and-sum GEMM")
        _, _, num_parts, head_dim = x.partials.shape
        merge = (x.lse, x.partials.stride(1), x.partials.stride(2), x.lse.stride(1), num_parts, head_dim)
        x2 = x.partials
    else:
        x2 = x.reshape(-1, x.shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
    m = x2.shape[0]
    if m == 0 or k == 0:
        y = torch.zeros(out_shape, dtype=x.dtype, device=x2.device)
        return y + bias if bias is not None else y
    interpreted = x2.device.type == "cpu"  # only under TRITON_INTERPRET, whose numpy dot lacks bf16
    if config is None and merge is not None:
        config = skinny_gemm_config(
            m, n, k, block_n=tuning.merge_block_n, split_k=tuning.merge_split_k, tuning=tuning
        )
    config = config or skinny_gemm_config(m, n, k, tuning=tuning)
    block_k, block_n = config.block_k, config.block_n
    k_per_split = triton.cdiv(triton.cdiv(k, config.split_k), block_k) * block_k
    num_splits = triton.cdiv(k, k_per_split)
    block_m = 16 if config.use_dot else min(16, triton.next_power_of_2(m))
    y = torch.empty(m, n, dtype=x.dtype, device=x2.device)
    dst = y if num_splits == 1 else torch.empty(num_splits, m, n, dtype=torch.float32, device=x2.device)
    grid = (triton.cdiv(n, block_n), num_splits, triton.cdiv(m, block_m))
    lse, stride_ph, stride_ps, stride_lh, merge_splits, head_dim = merge or (y, 0, 0, 0, 0, 1)
    _skinny_gemm_kernel[grid](
        x2, weight, bias if bias is not None else y, dst,
        m, n, k, k_per_split, x2.stride(0), weight.stride(0), dst.stride(0) if num_splits > 1 else 0,
        dst.stride(-2),
        HAS_BIAS=bias is not None, IS_PARTIAL=num_splits > 1, EVEN_N=n % block_n == 0,
        EVEN_K=k % block_k == 0 and k_per_split % block_k == 0,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, USE_DOT=config.use_dot,
        PRECISION="ieee" if x.dtype == torch.float32 or interpreted else "tf32", UPCAST=interpreted,
        SILU_MUL=silu_mul, lse_ptr=lse, stride_ph=stride_ph, stride_ps=stride_ps, stride_lh=stride_lh,
        MERGE_SPLITS=merge_splits, HEAD_DIM=head_dim,
        num_warps=config.num_warps, num_stages=config.num_stages, **pdl_launch(x2, tuning.pdl),
    )  # fmt: skip
    if num_splits > 1 and defer_sum:
        return SplitKPartials(dst, bias, x.dtype)
    if num_splits > 1:
        sum_splits(dst, bias, y, pdl=tuning.pdl)
    return y.view(out_shape)
