"""A token still on the device is a held place on the sequence, never a made-up id in ``token_ids``."""

import pytest

from engine.core.sampling_params import SamplingParams
from engine.core.sequence import Sequence
from engine.errors import EngineError


def test_a_held_place_counts_as_a_token_but_is_not_one() -> None:
    s = Sequence("r", "m", [5, 6, 7], SamplingParams(temperature=0))
    s.num_computed_tokens = 3
    s.hold_place()
    assert (s.num_tokens, s.num_output_tokens, s.num_uncomputed_tokens) == (4, 1, 1)
    assert s.token_ids == [5, 6, 7] and s.output_token_ids == []
    s.fill_place(9)
    assert s.token_ids == [5, 6, 7, 9] and s.output_token_ids == [9]
    assert (s.num_tokens, s.num_pending_tokens) == (4, 0)
    assert "pending=0" in repr(s)


def test_tokens_arrive_in_place_order_only() -> None:
    s = Sequence("r", "m", [5], SamplingParams(temperature=0))
    with pytest.raises(EngineError, match="no pending place"):
        s.fill_place(1)
    s.hold_place()
    with pytest.raises(EngineError, match="past a pending place"):
        s.append_token(2)
    assert s.token_ids == [5]
