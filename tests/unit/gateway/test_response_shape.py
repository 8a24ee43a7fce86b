"""ResponseShape: the answer's shape, and nothing of the request behind it."""

from __future__ import annotations

import pytest

from gateway.response_shape import ResponseShape


def test_ids_by_kind_and_at_least_one_choice() -> None:
    assert ResponseShape(is_chat=True, model="m").id_prefix == "chatcmpl-"
    assert ResponseShape(is_chat=False, model="m").id_prefix == "cmpl-"
    with pytest.raises(ValueError, match="at least one choice"):
        ResponseShape(is_chat=True, model="m", num_choices=0)
