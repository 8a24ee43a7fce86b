from __future__ import annotations

import math

import pytest
import torch

from engine.sampling.truncation import apply_min_p, apply_top_k_top_p

# Probabilities 0.5, 0.3, 0.15, 0.05, deliberately out of order in the vocabulary.
PROBS = [0.15, 0.5, 0.05, 0.3]
LOGITS = torch.tensor([[math.log(p) for p in PROBS]])


def _kept(logits: torch.Tensor) -> list[set[int]]:
    return [{i for i, v in enumerate(row) if v != float("-inf")} for row in logits.tolist()]


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.45, {1}), (0.79, {1, 3}), (0.81, {0, 1, 3}), (0.96, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3})],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p: float, kept: set[int]) -> None:
    assert _kept(apply_top_k_top_p(LOGITS, [0], [top_p])) == [kept]


@pytest.mark.parametrize(
    ("top_k", "kept"), [(1, {1}), (2, {1, 3}), (3, {0, 1, 3}), (0, {0, 1, 2, 3}), (9, {0, 1, 2, 3})]
)
def test_top_k_keeps_the_k_largest(top_k: int, kept: set[int]) -> None:
    assert _kept(apply_top_k_top_p(LOGITS, [top_k], [1.0])) == [kept]


def test_top_k_keeps_ties_at_the_boundary() -> None:
    assert _kept(apply_top_k_top_p(torch.tensor([[1.0, 2.0, 1.0, 0.0]]), [2], [1.0])) == [{0, 1, 2}]


def test_top_p_applies_to_what_top_k_kept() -> None:
    # After top-k=3 the mass is 0.5/0.95, 0.3/0.95, 0.15/0.95: 0.842 of it in the top two.
    assert _kept(apply_top_k_top_p(LOGITS, [3], [0.84])) == [{1, 3}]
    assert _kept(apply_top_k_top_p(LOGITS, [3], [0.85])) == [{0, 1, 3}]


def test_each_row_uses_its_own_settings_and_kept_logits_are_unchanged() -> None:
    logits = LOGITS.repeat(3, 1)
    out = apply_top_k_top_p(logits, [1, 0, 2], [1.0, 0.6, 0.3])
    assert _kept(out) == [{1}, {1, 3}, {1}]
    assert out[1, 1] == logits[1, 1] and out[1, 3] == logits[1, 3]


def test_min_p_is_relative_to_the_top_token() -> None:
    probs = torch.tensor([PROBS, PROBS])
    out = apply_min_p(probs, [0.2, 0.0])
    # 0.2 * 0.5 = 0.1: the 0.05 token goes; the second row is untouched.
    assert torch.equal(out, torch.tensor([[0.15, 0.5, 0.0, 0.3], PROBS]))
