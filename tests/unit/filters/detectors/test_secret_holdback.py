"""The secret hold-back's token marker, spelled for speed, finds what the plain spelling finds."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.detectors.secret import _SHAPE
from filters.detectors.secret_holdback import _LAST_WORD_STOP, _prefix_marker

PLAIN = re.compile(rf"(?<![a-z0-9])(?:{'|'.join(map(re.escape, _SHAPE.token_prefixes))})")
TEXTS = st.lists(
    st.sampled_from([*_SHAPE.token_prefixes, "a", "k", "s", "-", "_", "0", " ", '"', "x"]), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(parts=TEXTS, data=st.data())
def test_the_prefix_marker_matches_the_plain_alternation(parts: list[str], data: st.DataObject) -> None:
    text = "".join(parts)
    pos = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(pos, len(text)))
    marker = _prefix_marker(_SHAPE.token_prefixes)
    assert [m.span() for m in marker.finditer(text, pos, end)] == [
        m.span() for m in PLAIN.finditer(text, pos, end)
    ]


@settings(max_examples=300, deadline=None)
@given(parts=TEXTS, data=st.data())
def test_the_last_word_stop_is_the_last_space_or_quote(parts: list[str], data: st.DataObject) -> None:
    text = "".join(parts)
    pos = data.draw(st.integers(0, len(text)))
    stops = [i + 1 for i in range(pos, len(text)) if text[i] in " \"'"]
    found = _LAST_WORD_STOP.match(text, pos)
    assert (found.end() if found else None) == (stops[-1] if stops else None)
