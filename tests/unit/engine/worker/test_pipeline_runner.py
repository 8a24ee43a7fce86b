"""Micro-batches: contiguous, in order, as even as the sequence count allows, never empty."""

from __future__ import annotations

from typing import Any

import pytest

from engine.worker.pipeline_runner import micro_batches


@pytest.mark.parametrize(
    ("num_items", "stages", "sizes"),
    [(0, 2, []), (1, 4, [1]), (3, 2, [2, 1]), (7, 3, [3, 2, 2]), (4, 4, [1, 1, 1, 1]), (5, 1, [5])],
)
def test_micro_batches_split_in_order(num_items: int, stages: int, sizes: list[int]) -> None:
    items: list[Any] = list(range(num_items))
    batches = micro_batches(items, stages)
    assert [len(b) for b in batches] == sizes
    assert [i for b in batches for i in b] == items
