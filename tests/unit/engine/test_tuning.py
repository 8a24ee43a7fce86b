"""The CUDA path's one tuning config: frozen, validated, and the base of every benchmark variant."""

from __future__ import annotations

import dataclasses

import pytest

from bench.engine.graph_profile import VARIANTS
from engine.tuning import DEFAULT_TUNING, CudaTuning


def test_frozen_with_the_production_defaults() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_TUNING.pdl = False  # type: ignore[misc]
    assert CudaTuning() == DEFAULT_TUNING
    assert (DEFAULT_TUNING.greedy_tail_max_bucket, DEFAULT_TUNING.lm_head_block_n) == (1, 16)


@pytest.mark.parametrize(
    "bad",
    [
        {"gemv_block_n": 24},
        {"step_warps": 0},
        {"rope_in_attention_max_seqs": -1},
        {"merge_split_k": 0},
        {"int8_convert": "i2f"},
        {"long_row_chunk": 300},
        {"long_row_block_n": 48},
        {"norm_in_gemv_max_k": -1},
    ],
)
def test_bad_values_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="CudaTuning"):
        CudaTuning(**bad)  # type: ignore[arg-type]


def test_benchmark_variants_are_the_defaults_with_fields_replaced() -> None:
    assert VARIANTS["default"] == DEFAULT_TUNING
    for name, tuning in VARIANTS.items():
        assert isinstance(tuning, CudaTuning)
        changed = {
            f.name
            for f in dataclasses.fields(CudaTuning)
            if getattr(tuning, f.name) != getattr(DEFAULT_TUNING, f.name)
        }
        assert bool(changed) == (name != "default"), name
    assert VARIANTS["pdl_off"] == dataclasses.replace(DEFAULT_TUNING, pdl=False)
    assert VARIANTS["greedy_tail_off"].greedy_tail_max_bucket == 0
