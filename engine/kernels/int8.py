# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""INT8 weights to float32 inside a kernel, exactly, without the integer-to-float instruction.

A batch-1 GEMV streams its weight at some 18 bytes per clock per multiprocessor on an H200, and
the int8 -> float conversion (``cvt.rn.f32.s8``, I2F in SASS) issues at a fraction of the FMA
rate, so converting one weight byte per I2F bounds the kernel below what memory gives (FP8
converts two values per instruction). The sign bit flipped makes x + 128 in 0..255, small enough
to be the low mantissa bits of a float32 whose exponent is 23; taking away that float's offset
leaves x, exactly, with integer logic and one float add::

    b = bits(x) ^ 0x80 = x + 128                  0 <= b < 256, as an unsigned byte
    f = float32 with bits 0x4B000000 | b          2^23 + b exactly (2^23 has a mantissa ulp of 1)
    f - (2^23 + 128) = x                          exact: both are integers below 2^24

Three ways (``CudaTuning.int8_convert``), the same bits from each:

    "cvt"        x.to(float32): one I2F per byte
    "magic"      the above in Triton's integer ops: runs in the interpreter; the compiler spends
                 a PRMT or two logic ops per byte placing it
    "magic_asm"  the above in PTX on four bytes per register: one xor per four, then a PRMT that
                 places byte j under the exponent byte in one step, and the add. The interpreter
                 cannot run inline assembly: it runs "magic" instead; the PTX is compiled for
                 sm_90 by test_hopper_compile and its bits checked by the GPU sweep.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["int8_to_float"]

_EXPONENT_AND_SIGN = tl.constexpr(0x4B000080)
_OFFSET = tl.constexpr(8388736.0)  # 2^23 + 128

# prmt.b32 d, a, b, sel: byte i of d is byte sel[4i+2 : 4i] of {b, a} (a: 0..3, b: 4..7). With
# b = 0x4B000000, selector 0x754j is byte j of a under 0x4B 00 00: the float 2^23 + byte j.
_MAGIC_PTX = tl.constexpr("""{
.reg .b32 flipped;
xor.b32 flipped, $4, 0x80808080;
prmt.b32 $0, flipped, 0x4B000000, 0x7540;
prmt.b32 $1, flipped, 0x4B000000, 0x7541;
prmt.b32 $2, flipped, 0x4B000000, 0x7542;
prmt.b32 $3, flipped, 0x4B000000, 0x7543;
sub.f32 $0, $0, 0f4B000080;
sub.f32 $1, $1, 0f4B000080;
sub.f32 $2, $2, 0f4B000080;
sub.f32 $3, $3, 0f4B000080;
}""")


@triton.jit
def int8_to_float(w, INT8_CONVERT: tl.constexpr, INTERPRETED: tl.constexpr):
    """The int8 tensor w as float32, the same bits whichever ``INT8_CONVERT`` (see the module).
    ``INTERPRETED``: under ``TRITON_INTERPRET``, which runs no assembly: "magic_asm" takes the
    Triton form of the same trick there (so a default of "magic_asm" leaves the CPU tests running)."""
    if INT8_CONVERT == "magic_asm" and not INTERPRETED:
        # pack=4: four consecutive values of a thread in one register, value j in byte j.
        return tl.inline_asm_elementwise(
            _MAGIC_PTX, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4
        )
    elif INT8_CONVERT == "magic" or INT8_CONVERT == "magic_asm":
        bits = w.to(tl.uint8, bitcast=True).to(tl.uint32) ^ _EXPONENT_AND_SIGN
        return bits.to(tl.float32, bitcast=True) - _OFFSET
    else:
        return w.to(tl.float32)
