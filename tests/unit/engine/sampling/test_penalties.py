from __future__ import annotations

import pytest
import torch
from transformers import RepetitionPenaltyLogitsProcessor

from engine.core.sampling_params import SamplingParams
from engine.sampling.penalties import apply_penalties
from engine.sampling.sampler import SamplingRow


def _row(prompt: list[int], output: list[int], **kwargs: float) -> SamplingRow:
    return SamplingRow(params=SamplingParams(**kwargs), prompt_token_ids=prompt, output_token_ids=output)  # type: ignore[arg-type]


def test_all_penalties_match_a_hand_computed_reference() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0, 3.0]])
    row = _row([0], [1, 1, 2], repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    # repetition on {0, 1, 2}: 2/2, -1*2, 0.5/2; then output counts {1: 2, 2: 1}:
    # token 1: -2 - 2*0.5 - 0.25; token 2: 0.25 - 1*0.5 - 0.25. Tokens 3 and 4 untouched.
    expected = torch.tensor([[1.0, -3.25, -0.5, 0.0, 3.0]])
    assert torch.equal(apply_penalties(logits, [row]), expected)


def test_frequency_and_presence_ignore_prompt_tokens() -> None:
    logits = torch.zeros(1, 4)
    row = _row([0, 0, 0], [3], frequency_penalty=1.0, presence_penalty=1.0)
    assert apply_penalties(logits, [row]).tolist() == [[0.0, 0.0, 0.0, -2.0]]


def test_negative_penalties_encourage_repetition() -> None:
    row = _row([], [2, 2], frequency_penalty=-0.5, presence_penalty=-1.0)
    assert apply_penalties(torch.zeros(1, 3), [row]).tolist() == [[0.0, 0.0, 2.0]]


def test_rows_without_penalties_are_untouched_in_a_penalised_batch() -> None:
    logits = torch.randn(2, 8)
    rows = [_row([1], [2]), _row([1], [2], repetition_penalty=1.3)]
    out = apply_penalties(logits, rows)
    assert torch.equal(out[0], logits[0])
    assert not torch.equal(out[1], logits[1])


def test_no_penalty_returns_the_same_tensor() -> None:
    logits = torch.randn(2, 8)
    assert apply_penalties(logits, [_row([1], [2]), _row([], [])]) is logits


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_matches_transformers(penalty: float) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=generator) * 4
    sequences = torch.randint(0, 50, (3, 12), generator=generator)
    rows = [_row(seq[:5].tolist(), seq[5:].tolist(), repetition_penalty=penalty) for seq in sequences]
    ours = apply_penalties(logits, rows)
    theirs = RepetitionPenaltyLogitsProcessor(penalty)(sequences, logits.clone())
    assert torch.equal(ours, theirs)


def test_out_of_range_token_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="out of range"):
        apply_penalties(torch.zeros(1, 4), [_row([7], [], repetition_penalty=1.2)])
