"""The quantization benchmark's decode stage: which variants one call times."""

from __future__ import annotations

from dataclasses import replace

from bench.engine.quantization import _decode_variants, _throughput_variants
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


def test_quantized_throughput_variants_again_at_each_row_limit_asked_for() -> None:
    variants = _throughput_variants(("bf16", "fp8+fp8-kv"), (64,))
    assert [(label, q, kv, t.quant_gemv_max_rows) for label, q, kv, t in variants] == [
        ("bf16", None, "auto", DEFAULT_TUNING.quant_gemv_max_rows),
        ("fp8+fp8-kv", "fp8", "fp8", DEFAULT_TUNING.quant_gemv_max_rows),
        ("fp8+fp8-kv-rows64", "fp8", "fp8", 64),
    ]
    assert variants[0][3] is DEFAULT_TUNING
    assert [label for label, _, _, _ in _throughput_variants((), ())] == [
        "bf16",
        "fp8",
        "int8",
        "fp8-kv",
        "fp8+fp8-kv",
    ]


def test_every_variant_again_at_each_merge_limit_asked_for() -> None:
    variants = _decode_variants(("fp8",), (), (8192,), (4096,))
    assert [(label, t.norm_in_gemv_max_k, t.merge_max_k) for label, _, t in variants] == [
        ("fp8", DEFAULT_TUNING.norm_in_gemv_max_k, DEFAULT_TUNING.merge_max_k),
        ("fp8-norm8192", 8192, DEFAULT_TUNING.merge_max_k),
        ("fp8-merge4096", DEFAULT_TUNING.norm_in_gemv_max_k, 4096),
    ]
