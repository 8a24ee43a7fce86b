# mypy: disable-error-code="untyped-decorator, no-untyped-def"
"""Rounding to FP8 E4M3 inside a kernel, with the bits torch's ``.to(torch.float8_e4m3fn)`` gives.

The value is rounded on the E4M3 grid in float32 arithmetic (nearest, ties to even; saturating at
±448), so the cast that follows is exact. The hardware cast would round the same on a GPU, but
the Triton interpreter's fp8 cast does not (it rounds ties up and drops the carry into the
exponent: 0.4961 becomes 0.25), and the kernels are tested under it. The extra arithmetic runs
once per stored key and value, never on the attention's read side::

    step = 2^(max(exponent(x), -6) - 3)        3 mantissa bits; subnormals below 2^-6
    e4m3(x) = rint(x / step) * step            power-of-two scaling is exact in float32
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["cache_value", "to_e4m3", "widen_words_f16"]


@triton.jit
def to_e4m3(x, inv_scale):
    """x / scale (``inv_scale`` = 1 / scale) rounded to E4M3, as float8e4nv."""
    x = tl.clamp(x.to(tl.float32) * inv_scale, -448.0, 448.0)
    bits = x.to(tl.int32, bitcast=True)
    exponent = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    step = ((exponent + 124) << 23).to(tl.float32, bitcast=True)  # 2^(exponent - 3)
    inv_step = ((130 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^(3 - exponent)
    # Adding and taking away 1.5 * 2^23 rounds |y| < 2^22 to an integer, ties to even; it loses
    # the sign of a zero, which x's sign bit puts back (torch keeps -0).
    rounded = ((x * inv_step + 12582912.0) - 12582912.0) * step
    signed = rounded.to(tl.int32, bitcast=True) | ((bits >> 31) << 31)
    return signed.to(tl.float32, bitcast=True).to(tl.float8e4nv)


@triton.jit
def cache_value(x, inv_scale, FP8: tl.constexpr):
    """What a KV cache of this kind stores for x: x itself, or x / scale in E4M3."""
    # One return: Triton's compiler (not its interpreter) refuses a function whose returns have
    # different types, even when a constexpr branch means only one of them is ever taken.
    return to_e4m3(x, inv_scale) if FP8 else x


# One register of four E4M3 values (value j in byte j) to four f16: cvt.rn.f16x2.e4m3x2 widens
# the two bytes of a 16-bit half exactly, low byte to the low half.
_WIDEN_PTX = tl.constexpr("""{
.reg .b16 lo, hi;
.reg .b32 pair;
mov.b32 {lo, hi}, $4;
cvt.rn.f16x2.e4m3x2 pair, lo;
mov.b32 {$0, $1}, pair;
cvt.rn.f16x2.e4m3x2 pair, hi;
mov.b32 {$2, $3}, pair;
}""")


@triton.jit
def widen_words_f16(words, INTERPRETED: tl.constexpr):
    """[R, C] int32 words, each four E4M3 values, as the [R, 4 * C] f16 tile they hold (exact).

    Widened in registers where the words were loaded: a cast of an FP8 tile instead is moved by
    the compiler into the dot's operand loads, one byte-wise shared-memory load per value. The
    interpreter, which runs no assembly, takes each byte out and casts it (``INTERPRETED``)."""
    if INTERPRETED:
        v0 = _byte_f16(words, 0)
        v1 = _byte_f16(words, 8)
        v2 = _byte_f16(words, 16)
        v3 = _byte_f16(words, 24)
    else:
        v0, v1, v2, v3 = tl.inline_asm_elementwise(
            _WIDEN_PTX, "=h,=h,=h,=h,r", [words], dtype=(tl.float16,) * 4, is_pure=True, pack=1
        )
    # join adds a minor dimension: [..., i, j] of join(join(v0, v2), join(v1, v3)) is value 2i + j
    # (join(join(v0, v1), join(v2, v3)) puts them in the order 0, 2, 1, 3).
    quads = tl.join(tl.join(v0, v2), tl.join(v1, v3))
    return tl.reshape(quads, (words.shape[0], 4 * words.shape[1]))


@triton.jit
def _byte_f16(words, SHIFT: tl.constexpr):
    return ((words >> SHIFT) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
