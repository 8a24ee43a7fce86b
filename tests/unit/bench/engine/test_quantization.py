"""The quantization benchmark's decode stage: which variants one call times."""

from __future__ import annotations

from dataclasses import replace

from bench.engine.quantization import _decode_variants
from engine.tuning import DEFAULT_TUNING


def test_int8_decode_once_per_conversion_asked_for() -> None:
    variants = _decode_variants(("fp8", "int8"), ("cvt", "magic_asm"))
    assert [(label, q, t.int8_convert) for label, q, t in variants] == [
        ("fp8", "fp8", DEFAULT_TUNING.int8_convert),
        ("int8-cvt", "int8", "cvt"),
        ("int8-magic_asm", "int8", "magic_asm"),
    ]
    assert variants[2][2] == replace(DEFAULT_TUNING, int8_convert="magic_asm")
    assert [label for label, _, _ in _decode_variants((), ())] == ["bf16", "fp8", "int8"]


def test_every_variant_again_at_each_norm_limit_asked_for() -> None:
    variants = _decode_variants(("fp8", "int8"), ("magic",), (1024,))
    assert [(label, q, t.int8_convert, t.norm_in_gemv_max_k) for label, q, t in variants] == [
        ("fp8", "fp8", DEFAULT_TUNING.int8_convert, DEFAULT_TUNING.norm_in_gemv_max_k),
        ("fp8-norm1024", "fp8", DEFAULT_TUNING.int8_convert, 1024),
        ("int8-magic", "int8", "magic", DEFAULT_TUNING.norm_in_gemv_max_k),
        ("int8-magic-norm1024", "int8", "magic", 1024),
    ]


def test_every_variant_again_at_each_merge_limit_asked_for() -> None:
    variants = _decode_variants(("fp8",), (), (8192,), (4096,))
    assert [(label, t.norm_in_gemv_max_k, t.merge_max_k) for label, _, t in variants] == [
        ("fp8", DEFAULT_TUNING.norm_in_gemv_max_k, DEFAULT_TUNING.merge_max_k),
        ("fp8-norm8192", 8192, DEFAULT_TUNING.merge_max_k),
        ("fp8-merge4096", DEFAULT_TUNING.norm_in_gemv_max_k, 4096),
    ]
