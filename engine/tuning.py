"""Every tuning choice of the CUDA path, in one frozen config: which fusions the fused step takes
and the launch shapes of the kernels it runs.

The defaults are the production values. It is not a deployment setting: the engine takes one at
construction (``LLMEngine(config, tuning=...)``, default ``CudaTuning()``) and passes it down
(``ModelRunner`` -> ``FusedStep``, ``CudaGraphRunner``, the Triton attention backend), and every
kernel takes it as an argument. A benchmark variant is ``dataclasses.replace(CudaTuning(), ...)``
(``bench.engine.graph_profile.VARIANTS``). A leaf module (no imports), so the kernels can read it without
importing anything above them. Every fusion computes the same bits as the kernels it replaces, so
no field changes a token; they change only time (measured in ``bench/BENCHMARKS.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args

__all__ = ["DEFAULT_TUNING", "CudaTuning", "Int8Convert"]

Int8Convert = Literal["cvt", "magic", "magic_asm"]
"""How INT8 weights become float32 in a kernel (``kernels.int8``)."""

_POWERS_OF_TWO = (
    "gemv_block_n",
    "gemv_warps",
    "lm_head_block_n",
    "lm_head_warps",
    "long_row_block_n",
    "long_row_chunk",
    "long_row_warps",
    "one_row_block_n",
    "one_row_warps",
    "merge_block_n",
    "merge_warps",
    "small_batch_tile_n",
    "small_batch_warps",
    "small_batch_max_splits",
    "step_block",
    "step_warps",
)


@dataclass(frozen=True, slots=True)
class CudaTuning:
    pdl: bool = True
    """Launch kernels with programmatic dependent launch on Hopper and later (``kernels.pdl``):
    a kernel's blocks start, and load its weights, while the kernel ahead is still finishing."""

    skinny_gemm: bool = True
    """Half-precision matmuls of at most 16 rows (decode) run the weight-streaming Triton GEMM
    (``kernels.skinny_gemm``) instead of cuBLAS, whose launch and tiling overheads dominate there.
    Off, every fusion into a GEMM is off too."""
    quant_gemv_max_rows: int = 256
    """Quantized-weight matmuls of at most this many rows (decode batches) run ``kernels.quant_gemv``,
    which dequantizes in its loads: one launch per GEMM, as the bf16 path's. Above (prefill),
    ``fp8_scaled_mm`` for FP8 and a dequantized copy of the weight for INT8."""
    int8_convert: Int8Convert = "magic_asm"
    """How the one-row GEMVs (``kernels.quant_gemv``, ``kernels.normed_gemv``) turn INT8 weights into float32
    (``kernels.int8``; the same bits from each): "cvt", the int-to-float instruction, whose rate
    bounds the GEMV below what memory gives; "magic", through a float's mantissa in Triton's
    integer ops; "magic_asm", the same in PTX on four bytes per register (the interpreter, which
    runs no assembly, takes "magic" for it), the fastest of the three at every Llama-3-8B shape on
    the H200 (``bench.engine.quant_gemv_sweep --int8``). Tensor-core dots (2..16 rows and more)
    always take "cvt", which the compiler lowers to bf16 pairs without the instruction."""
    fp8_scaled_mm: bool = True
    """FP8-weight matmuls of more than ``quant_gemv_max_rows`` rows (prefill) quantize the
    activations to FP8 per row and run ``torch._scaled_mm`` (``quantization.scaled_mm``), not a
    dequantized bf16 copy of the weight per call through cuBLAS. Off keeps activations in bf16
    (weight-only)."""
    fp8_kv_widen_asm: bool = True
    """Attention over an FP8 KV cache (16-bit activations) loads each K/V tile as int32 words and
    widens them to f16 in PTX, four values a register (``kernels.e4m3.widen_words_f16``). Off, it
    casts the FP8 tile, which Triton's compiler moves into the dot's operand loads: one byte-wise
    shared-memory load per value, a longer loop than a bf16 cache's (bench/BENCHMARKS.md). The
    same bits either way; the interpreter, which runs no assembly, reads the same words and casts
    their bytes one by one."""
    rope_in_attention_max_seqs: int = 15
    """Decode steps of at most this many sequences run RoPE and the cache write inside the
    attention kernel (``kernels.paged_attention.decode_attention``): at small batches a step is a
    chain of latency-bound launches, and this takes one out of every layer. 0: off."""
    merge_in_gemm: bool = True
    """One decode token: attention hands its split-K partials to o_proj, whose one-row GEMM merges
    them as it loads them (``kernels.split_merge``): one dependent launch fewer per layer."""
    merge_max_k: int = 2048
    """Widest o_proj input merged inside it. Every o_proj program re-reads its K slice's partials;
    a wider model (Llama-3-8B: 4,096) would re-read as many bytes of partials as of weights."""
    norm_in_gemv: bool = True
    """One row (batch-1 decode): the residual add and RMSNorm are computed by the GEMM that
    consumes them (``kernels.normed_gemv``) instead of a norm kernel of their own."""
    norm_in_gemv_max_k: int = 1024
    """Widest row (hidden size) whose norm is left to the GEMM after it (with ``norm_in_gemv``,
    ``final_norm_in_lm_head``, ``gather_in_first_gemv``). Rows up to 1,024 are one register tile;
    wider ones (Llama-3-8B: 4,096; 70B: 8,192) are walked in chunks (``long_row_*``) when this
    allows them. 1024: on the H200 the chunked rows made FP8 8B decode a third slower than the
    norm kernel (every program re-reads and re-norms the whole row; ``bench.engine.quantization
    --norm-in-gemv-max-k 8192``, bench/BENCHMARKS.md)."""
    final_norm_in_lm_head: bool = True
    """One row on one rank: the model's final RMSNorm runs inside the LM head's GEMV, which
    writes float32 logits directly."""
    gather_in_first_gemv: bool = True
    """One token on one rank: the first layer's norm-and-GEMV gathers the token's embedding row
    itself, instead of an embedding kernel and a norm kernel."""
    greedy_tail_max_bucket: int = 1
    """Decode graphs of at most this many rows end with ``kernels.step_advance``: the greedy token
    and the next step's inputs are made on the device. At one sequence that takes the argmax, both
    copies and the token's scatter off the step's stream; bigger batches mostly sample, and their
    host work hides behind longer steps. 0: off."""

    split_mixed_max_prefills: int = 2
    """A step of decodes and at most this many prefill chunks (each short enough for a prefill
    graph) runs as the decode graph plus one prefill-graph replay per chunk, instead of eagerly:
    eager, such a step is hundreds of launches and costs every running stream a token's delay
    each time a prompt arrives. Each replay reads the weights again, so the split stops paying
    with many chunks. 0: off."""

    gemv_block_n: int = 32
    """W rows per program of the layers' norm-and-GEMV. Every program recomputes the norm, so
    fewer, wider programs repeat less of it but stream W over fewer multiprocessors."""
    gemv_warps: int = 8
    """Warps per program of the layers' norm-and-GEMV."""
    lm_head_block_n: int = 16
    """Vocabulary rows per program of the LM head's norm-and-GEMV, the one large GEMV of a decode
    step (some 9,500 programs at a 152k vocabulary)."""
    lm_head_warps: int = 4
    """Warps per program of the LM head: with fewer warps more of its programs fit beside the
    kernel ahead of it. (``lm_head_block_n`` and ``lm_head_warps`` are those of rows of at most
    1,024; a longer row's LM head takes the ``long_row_*`` shape.)"""
    long_row_block_n: int = 32
    """W rows per program of a norm-and-GEMV over a row longer than 1,024 (the LM head's too).
    Every program reads the row twice from L2 (its sum of squares, then its norm), as many bytes
    as the split-K partials and residual it sums: wider programs re-read it fewer times."""
    long_row_chunk: int = 512
    """Columns per loop step of a norm-and-GEMV over a row longer than 1,024; the first chunk of
    W is loaded before the wait for the kernel ahead."""
    long_row_warps: int = 8
    """Warps per program of a norm-and-GEMV over a row longer than 1,024."""

    one_row_block_n: int = 16
    """W rows per program of a one-row skinny GEMM."""
    one_row_split_k: int = 4
    """K slices of a narrow, long W (N <= 4096, K >= 2048) in a one-row skinny GEMM, so enough
    programs stream it."""
    one_row_warps: int = 8
    """Warps per program of a one-row skinny GEMM that loads its whole K slice as one tile."""
    prefetch_whole_slice: bool = True
    """One row, W under 64 Ki columns: each program loads its whole K slice as one tile, which
    under PDL streams in before the kernel ahead has finished. Off: tiles of 256/512 columns."""

    merge_block_n: int = 32
    """W rows per program of the o_proj GEMM that merges attention partials: every program re-reads
    its K slice's partials, so fewer, wider programs than a plain one-row GEMM's."""
    merge_split_k: int | None = None
    """K slices of that GEMM; None: the plain one-row GEMM's."""
    merge_warps: int = 4
    """Warps per program of the separate merge kernel."""

    prefetch_small_batch: bool = True
    """Decode of under 16 sequences: attention loads its first K/V tile before waiting for the
    kernel ahead."""
    small_batch_tile_n: int = 32
    """Keys per loop step of attention for decode of under 16 sequences."""
    small_batch_warps: int = 4
    """Warps per program of attention for decode of under 16 sequences."""
    small_batch_max_splits: int = 16
    """Most splits of a sequence's keys (flash-decoding) under 16 sequences, where a step is
    latency-bound."""

    step_block: int = 1024
    """Logits per program of ``step_advance`` (one wave of programs for a 152k vocabulary)."""
    step_warps: int = 4
    """Warps per program of ``step_advance``."""

    def __post_init__(self) -> None:
        for name in _POWERS_OF_TWO:
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"CudaTuning.{name} must be a power of two, got {value}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"CudaTuning.{f.name} must not be negative, got {value}")
        if self.int8_convert not in get_args(Int8Convert):
            raise ValueError(
                f"CudaTuning.int8_convert must be cvt, magic or magic_asm, got {self.int8_convert!r}"
            )
        if self.one_row_split_k < 1 or (self.merge_split_k is not None and self.merge_split_k < 1):
            raise ValueError("CudaTuning split counts must be positive")


DEFAULT_TUNING = CudaTuning()
"""The production values, for callers of a kernel that tune nothing (tests, benchmarks)."""
