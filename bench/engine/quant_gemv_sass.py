"""What each INT8 conversion costs in ``quant_gemv``'s one-row loop, read off the SASS an H200
would run — compiled on this machine (no GPU: Triton's ptxas and nvdisasm)::

    python -m bench.engine.quant_gemv_sass [--out results.txt]

For Llama-3-8B's shapes at one row, the kernel is compiled for sm_90 at quant_gemv's launch shape
with each ``CudaTuning.int8_convert`` (and FP8 beside them), and the instructions of its K loop
(from the loop's label to its backward branch) counted per weight byte a thread streams: I2F is
the int-to-float conversion, issued at a quarter of the ALU rate; all instructions together bound
the loop at 128 per clock per multiprocessor (four warp schedulers).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, get_args

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from bench.engine.skinny_gemm_sweep import MODEL_SHAPES, line_writer
from engine.kernels.quant_gemv import _quant_gemv_kernel, quant_gemv_config
from engine.tuning import Int8Convert

_HOPPER = GPUTarget("cuda", 90, 32)
_POINTERS = ("x_ptr", "w_ptr", "s_ptr", "b_ptr", "y_ptr")
_INTS = (
    "m",
    "n",
    "k",
    "k_per_split",
    "group",
    "stride_xm",
    "stride_wn",
    "stride_sn",
    "stride_ys",
    "stride_ym",
)
_ALIGNED = ("n", "k", "k_per_split", "group", "stride_xm", "stride_wn", "stride_ym")
"""Integers a launch on these shapes specializes as divisible by 16 (as the pointers)."""
_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)(.*)")


def _compile(weight: str, convert: str, block_n: int, block_k: int, num_warps: int, split: bool) -> Any:
    constexprs = dict(HAS_BIAS=False, IS_PARTIAL=split, PER_CHANNEL=True, EVEN=True, BLOCK_M=1, BLOCK_N=block_n,
                      BLOCK_K=block_k, USE_DOT=False, PRECISION="tf32", UPCAST=False, SILU_MUL=False,
                      EVICT="evict_first", INT8_CONVERT=convert, INTERPRETED=False, PDL=True)  # fmt: skip
    signature = {p: weight if p == "w_ptr" else "*fp32" if p in ("s_ptr", "y_ptr") and split else "*bf16"
                 for p in _POINTERS} | dict.fromkeys(_INTS, "i32") | dict.fromkeys(constexprs, "constexpr")  # fmt: skip
    signature["s_ptr"] = "*fp32"
    attrs = {
        (_quant_gemv_kernel.arg_names.index(a),): CUDABackend.parse_attr("D") for a in _POINTERS + _ALIGNED
    }
    source = ASTSource(_quant_gemv_kernel, signature, constexprs, attrs)
    return triton.compile(source, target=_HOPPER, options={"num_warps": num_warps, "launch_pdl": True})


def _sass(cubin: bytes) -> str:
    nvdisasm = Path(triton.__file__).parent / "backends/nvidia/bin/nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True
        ).stdout


def loop_instructions(sass: str) -> collections.Counter[str]:
    """Opcodes from the label of the last backward branch to that branch: the kernel's K loop."""
    labels: dict[str, int] = {}
    ops: list[tuple[str, str]] = []
    for line in sass.splitlines():
        if label := re.match(r"^\.(L_x_\d+):", line):
            labels[label.group(1)] = len(ops)
        elif instruction := _INSTRUCTION.match(line):
            ops.append((instruction.group(1), instruction.group(2)))
    loop = (0, len(ops))
    for i, (op, rest) in enumerate(ops):
        target = re.search(r"`\(\.(L_x_\d+)\)", rest)
        if op.startswith("BRA") and target and labels.get(target.group(1), i) < i:
            loop = (labels[target.group(1)], i + 1)
    return collections.Counter(op for op, _ in ops[loop[0] : loop[1]])


def main() -> None:
    write = line_writer(sys.argv)
    variants = [("*fp8e4nv", "cvt", "fp8")] + [("*i8", c, f"int8 {c}") for c in get_args(Int8Convert)]
    for name, (n, k) in MODEL_SHAPES["llama-3-8b"].items():
        if name == "lm_head":
            continue
        config = quant_gemv_config(1, n, k)
        block_k = min(config.block_k, k)
        per_thread = config.block_n * block_k / (config.num_warps * 32)  # weight bytes per loop step
        write(f"llama-3-8b {name} N={n} K={k}: {config.block_n} x {block_k}, split {config.split_k}, "
              f"{config.num_warps} warps: {per_thread:.0f} weight bytes per thread per step")  # fmt: skip
        for weight, convert, label in variants:
            body = loop_instructions(_sass(_compile(weight, convert, config.block_n, block_k, config.num_warps,
                                                    config.split_k > 1).asm["cubin"]))  # fmt: skip
            total, i2f = sum(body.values()), sum(v for op, v in body.items() if op.startswith("I2F"))
            top = ", ".join(f"{op} {v / per_thread:.2f}" for op, v in body.most_common(6))
            write(f"    {label:15s} {total / per_thread:.2f} instr/B (I2F {i2f / per_thread:.2f}): {top}")


if __name__ == "__main__":
    main()
