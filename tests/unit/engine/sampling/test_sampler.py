from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.sampling import Sampler, SamplingRow, make_generator

VOCAB = 64


def _row(seed: int | None = None, *, output: list[int] | None = None, **kwargs: Any) -> SamplingRow:
    params = SamplingParams(seed=seed, **kwargs)
    return SamplingRow(
        params=params,
        prompt_token_ids=[1, 2, 3],
        output_token_ids=output or [],
        generator=make_generator(seed, 0, "cpu"),
    )


def _logits(num_seqs: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(num_seqs, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_exactly_the_argmax_of_raw_logits() -> None:
    logits = _logits(8)
    rows = [_row(temperature=0) for _ in range(8)]
    out = Sampler()(logits, rows)
    assert torch.equal(out.token_ids, logits.argmax(dim=-1))
    assert out.logprobs == [None] * 8


def test_greedy_rows_stay_greedy_in_a_mixed_batch() -> None:
    logits = _logits(6)
    rows = [_row(temperature=0) if i % 2 == 0 else _row(seed=i, temperature=1.5) for i in range(6)]
    out = Sampler()(logits, rows)
    assert torch.equal(out.token_ids[::2], logits.argmax(dim=-1)[::2])


def test_a_given_argmax_is_the_output_only_where_greedy_is_the_raw_argmax() -> None:
    logits = torch.tensor([[1.0, 0.9, 0.0], [0.0, 0.5, 2.0]])
    given = torch.tensor([0, 2])  # what the decode graph computed
    out = Sampler()(logits, [_row(temperature=0), _row(temperature=0)], given)
    assert out.token_ids is given  # not recomputed: the graph's tensor goes on to the next step
    # A penalty changes the logits: the given argmax no longer applies.
    penalised = [_row(temperature=0, output=[0], presence_penalty=0.2), _row(temperature=0)]
    assert Sampler()(logits, penalised, given).token_ids.tolist() == [1, 2]

    # A sampled row: drawn as ever (seeded, so compare with a run without the argmax).
    def mixed() -> list[SamplingRow]:
        return [_row(temperature=0), _row(seed=3, temperature=1.0)]

    assert torch.equal(Sampler()(logits, mixed(), given).token_ids, Sampler()(logits, mixed()).token_ids)
    with pytest.raises(ValueError, match="argmax"):
        Sampler()(logits, [_row(temperature=0), _row(temperature=0)], given[:1])


@pytest.mark.parametrize("params", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}])
def test_degenerate_truncation_equals_greedy(params: dict[str, Any]) -> None:
    logits = _logits(16, seed=1)
    rows = [_row(seed=s, temperature=2.0, **params) for s in range(16)]
    out = Sampler()(logits, rows)
    assert torch.equal(out.token_ids, logits.argmax(dim=-1))


def _generate(
    sampler: Sampler, row_of_interest: SamplingRow, others: list[SamplingRow], steps: int
) -> list[int]:
    """Sample `steps` tokens for one row placed in the middle of a batch of `others`."""
    tokens = []
    position = len(others) // 2
    rows = [*others[:position], row_of_interest, *others[position:]]
    for step in range(steps):
        logits = _logits(len(rows), seed=1000 + step)
        # The row of interest always sees the same logits, whatever the batch is.
        logits[position] = _logits(1, seed=step)[0]
        tokens.append(int(sampler(logits, rows).token_ids[position]))
    return tokens


def test_seed_gives_the_same_tokens_whatever_else_is_in_the_batch() -> None:
    params: dict[str, Any] = {"temperature": 0.9, "top_p": 0.95, "top_k": 40}
    alone = _generate(Sampler(), _row(seed=42, **params), [], steps=20)
    crowd = [_row(seed=7, temperature=1.3), _row(temperature=0.5), _row(temperature=0), _row(seed=42)]
    crowd += [_row(temperature=1.0, min_p=0.1) for _ in range(5)]
    crowded = _generate(Sampler(torch.Generator().manual_seed(3)), _row(seed=42, **params), crowd, steps=20)
    assert crowded == alone
    other_seed = _generate(Sampler(), _row(seed=43, **params), [], steps=20)
    assert other_seed != alone


def test_child_generators_differ_and_repeat() -> None:
    logits = _logits(1).repeat(2, 1)

    def children() -> list[list[int]]:
        rows = [
            SamplingRow(
                params=SamplingParams(seed=5, n=2),
                prompt_token_ids=[1],
                output_token_ids=[],
                generator=make_generator(5, index, "cpu"),
            )
            for index in range(2)
        ]
        sampler = Sampler()
        return [sampler(logits, rows).token_ids.tolist() for _ in range(10)]

    first, second = children(), children()
    assert first == second
    assert [a for a, _ in first] != [b for _, b in first]


def test_samples_follow_the_tempered_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    num_draws = 20_000
    rows = [_row(temperature=0.7) for _ in range(num_draws)]
    out = Sampler(torch.Generator().manual_seed(0))(logits.repeat(num_draws, 1), rows)
    observed = torch.bincount(out.token_ids, minlength=4).double() / num_draws
    expected = torch.softmax(logits[0].double() / 0.7, dim=-1)
    # Binomial standard error is at most 0.0036 here; 4 sigma.
    assert torch.allclose(observed, expected, atol=0.015)


def test_top_k_and_min_p_never_sample_outside_the_kept_set() -> None:
    logits = torch.tensor([[3.0, 2.5, 2.0, 0.0, -1.0, -2.0]])
    num_draws = 2_000
    probs = torch.softmax(logits[0], dim=-1)
    sampler = Sampler(torch.Generator().manual_seed(0))
    top_k = sampler(logits.repeat(num_draws, 1), [_row(top_k=2) for _ in range(num_draws)])
    assert set(top_k.token_ids.tolist()) == {0, 1}
    min_p = 0.5
    kept = {i for i, p in enumerate(probs.tolist()) if p >= min_p * float(probs.max())}
    assert kept == {0, 1}
    out = sampler(logits.repeat(num_draws, 1), [_row(min_p=min_p) for _ in range(num_draws)])
    assert set(out.token_ids.tolist()) == kept


def test_presence_penalty_moves_greedy_off_a_repeated_token() -> None:
    logits = torch.tensor([[1.0, 0.9, 0.0]])
    assert Sampler()(logits, [_row(temperature=0, output=[0])]).token_ids.tolist() == [0]
    penalised = Sampler()(logits, [_row(temperature=0, output=[0], presence_penalty=0.2)])
    assert penalised.token_ids.tolist() == [1]


def test_logprobs_are_the_raw_log_softmax() -> None:
    logits = _logits(3, seed=4)
    rows = [
        _row(seed=1, temperature=0.5, top_k=3, repetition_penalty=1.5, logprobs=5),
        _row(temperature=0),
        _row(temperature=0, logprobs=0, frequency_penalty=1.0, output=[int(logits[2].argmax())]),
    ]
    out = Sampler()(logits, rows)
    reference = torch.log_softmax(logits, dim=-1)
    first = out.logprobs[0]
    assert first is not None and out.logprobs[1] is None
    token = int(out.token_ids[0])
    assert first.token_id == token
    assert first.logprob == pytest.approx(float(reference[0, token]), abs=1e-6)
    assert first.rank == int((reference[0] > reference[0, token]).sum()) + 1
    values, ids = reference[0].topk(5)
    assert [t for t, _ in first.top] == ids.tolist()
    assert [v for _, v in first.top] == pytest.approx(values.tolist(), abs=1e-6)
    assert math.fsum(math.exp(v) for v in reference[0].tolist()) == pytest.approx(1.0)
    third = out.logprobs[2]
    assert third is not None and third.top == ()
    # The frequency penalty moved greedy off the raw argmax; the reported logprob is still raw.
    assert third.rank > 1
    assert third.logprob == pytest.approx(float(reference[2, third.token_id]), abs=1e-6)


def test_logits_that_do_not_match_the_rows_are_rejected() -> None:
    with pytest.raises(ValueError, match="do not match"):
        Sampler()(_logits(2), [_row()])
    with pytest.raises(ValueError, match="do not match"):
        Sampler()(torch.zeros(VOCAB), [_row()])


def test_row_repr_does_not_show_token_ids() -> None:
    row = SamplingRow(params=SamplingParams(), prompt_token_ids=[31337], output_token_ids=[4242])
    assert "31337" not in repr(row) and "4242" not in repr(row)
