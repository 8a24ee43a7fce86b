"""logit_bias: added before everything else, bans and forces tokens, leaves the raw logprobs alone."""

from __future__ import annotations

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.errors import InvalidRequestError
from engine.sampling import Sampler, SamplingRow, make_generator


def _row(seed: int | None = None, **kwargs: object) -> SamplingRow:
    return SamplingRow(
        params=SamplingParams(seed=seed, **kwargs),  # type: ignore[arg-type]
        prompt_token_ids=(),
        output_token_ids=(),
        generator=make_generator(seed, 0, "cpu"),
    )


def test_a_bias_of_minus_100_bans_the_argmax_and_plus_100_forces_a_token() -> None:
    logits = torch.tensor([[5.0, 1.0, 0.0, -1.0], [5.0, 1.0, 0.0, -1.0], [5.0, 1.0, 0.0, -1.0]])
    given = logits.argmax(dim=-1)  # what a decode graph computed before the bias
    rows = [
        _row(temperature=0, logit_bias=((0, -100.0),)),
        _row(temperature=0, logit_bias=((3, 100.0),), logprobs=1),
        _row(temperature=0),
    ]
    out = Sampler()(logits.clone(), rows, given)
    assert out.token_ids.tolist() == [1, 3, 0]
    # Logprobs are the model's: the forced token keeps its raw, unlikely logprob.
    lp = out.logprobs[1]
    assert lp is not None and lp.token_id == 3
    assert lp.logprob == pytest.approx(torch.log_softmax(logits[1], -1)[3].item())


def test_a_sampled_row_never_draws_a_banned_token() -> None:
    logits = torch.zeros(1, 8)
    banned = tuple((t, -100.0) for t in range(7))
    drawn = {
        int(Sampler()(logits.clone(), [_row(seed=s, logit_bias=banned)]).token_ids[0]) for s in range(20)
    }
    assert drawn == {7}


def test_top_p_zero_keeps_only_the_top_token() -> None:
    logits = torch.tensor([[0.1, 2.0, 1.9, 0.0]])
    drawn = {int(Sampler()(logits.clone(), [_row(seed=s, top_p=0.0)]).token_ids[0]) for s in range(20)}
    assert drawn == {1}


@pytest.mark.parametrize("bias", [((1, 100.5),), ((1, -101.0),), ((-1, 1.0),), ((1, float("nan")),)])
def test_out_of_range_biases_are_refused(bias: tuple[tuple[int, float], ...]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams(logit_bias=bias)
    assert info.value.param == "logit_bias"
