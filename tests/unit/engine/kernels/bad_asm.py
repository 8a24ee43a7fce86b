# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""A kernel whose inline PTX ptxas rejects, as a slip in ``engine.kernels.int8``'s would be.

The interpreter runs no assembly, so only ``test_hopper_compile`` sees it; ptxas prints the
rejected source on stdout, which the compiling child must keep out of its answers."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["bad_asm_kernel"]


@triton.jit
def bad_asm_kernel(x_ptr, out_ptr):
    i = tl.arange(0, 16)
    x = tl.load(x_ptr + i)
    y = tl.inline_asm_elementwise(
        "prmtx.b32 $0, $1, 0, 0x3210;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1
    )
    tl.store(out_ptr + i, y)
