"""The e-mail hold-back's chain rules, read directly: the hold point after every delta is the one
the rules give for everything read so far, however the text is split and wherever the buffer
was cut."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filters.detectors.email import EmailDetector
from filters.detectors.email_holdback import EmailHoldback

MAX_LEN = EmailDetector.max_match_len
_TOKENS = re.compile(
    r"(?P<word>[a-z0-9._%+\-@\[\](){}<>]+)|(?P<gap>\s+)|(?P<other>[^a-z0-9._%+\-@\[\](){}<>\s]+)"
)
_TOUCHING = set("[](){}<>@.")


def chain_hold(text: str) -> int:
    """The hold point the module docstring's rules give for ``text`` read whole, worked out
    word by word: the last word, extended back over every gap of at most three whitespace
    characters that touches a connector (the last word also while it may still become one)."""
    tokens = [(m.lastgroup, m.start(), m.group()) for m in _TOKENS.finditer(text)]
    n = len(text)
    cap = n - (MAX_LEN - 1)
    if not tokens or tokens[-1][0] == "other":
        return max(n, cap)
    after_other = max((i + 1 for i, t in enumerate(tokens) if t[0] == "other"), default=0)
    chain: list[tuple[int, int]] = []  # per word of the live part: (its start, its chain's start)
    words = [t for t in tokens[after_other:] if t[0] == "word"]
    gaps = [len(t[2]) for t in tokens[after_other:] if t[0] == "gap"]
    leading_gap = tokens[after_other][0] == "gap"
    for i, (_, start, word) in enumerate(words):
        gap = gaps[i - 1 + leading_gap] if i else None
        before = words[i - 1][2] if i else ""
        bridges = gap is not None and gap <= 3 and _touches(before, word, is_last_open=False)
        chain.append((start, chain[-1][1] if bridges else start))
    if tokens[-1][0] == "gap":
        hold = chain[-1][1] if words and len(tokens[-1][2]) <= 3 else n
        return max(hold, cap)
    last = words[-1][2]
    gap = gaps[-1] if len(words) > 1 else None
    if gap is not None and gap <= 3 and _touches(words[-2][2], last, is_last_open=True):
        return max(chain[-2][1], cap)
    return max(words[-1][1], cap)


def _touches(before: str, after: str, *, is_last_open: bool) -> bool:
    connectors = ("at", "dot")
    if before in connectors or before[-1] in _TOUCHING or after[:4] in connectors or after[0] in _TOUCHING:
        return True
    return is_last_open and after in ("a", "d", "do")


def holds(deltas: list[str], cut_at: list[int] | None = None) -> list[int]:
    """The hold point after each delta; ``cut_at[i]``: the buffer handed over starts there."""
    holdback = EmailHoldback(MAX_LEN)
    text, seen = "", []
    for i, delta in enumerate(deltas):
        begin = len(text)
        text += delta
        base = min(cut_at[i], begin) if cut_at else 0
        seen.append(holdback.advance(text[base:], base, begin))
    return seen


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("please write to zhang at exa", "zhang at exa"),
        ("please write to me", "me"),
        ("please write to me ", "me "),
        ("please write to me    ", ""),  # four spaces: the next word cannot join "me"
        ("mail zhang [at] exa", "zhang [at] exa"),
        ("mail zhang (dot)", "zhang (dot)"),
        ("mail zhang and", "and"),
        ("mail zhang a", "zhang a"),  # "a" may still become "at"
        ("mail zhang do", "zhang do"),
        ("mail zhang dots", "dots"),
        ("zhang    at exa", "at exa"),  # the gap before "at" is too long to bridge
        ("zhang,at exa", "at exa"),  # a comma ends every chain
        ("邮箱是zhang.san@exa", "zhang.san@exa"),
        ("he said 洗", ""),
        ("words. the end", "end"),  # "words." bridges to "the", "the" not to "end"
        ("words. the", "words. the"),
        ("at\u3000exa", "at\u3000exa"),  # any whitespace, an ideographic space too
        ("at \t\n exa", "exa"),
        ("x" * 400, "x" * (MAX_LEN - 1)),
    ],
)
def test_the_hold_point_follows_the_chain_rules(text: str, held: str) -> None:
    whole = [holds([text])[-1], holds(list(text))[-1]]
    assert whole == [len(text) - len(held)] * 2
    assert chain_hold(text) == len(text) - len(held)


@pytest.mark.parametrize(
    "text",
    [
        "the heads split the work, and the output is a distribution over tokens ",
        "write to zhang at example dot com or to li [at] example [dot] org. thanks",
        "a b c d e f at g dot h i j at",
        "foo.bar baz. qux at  quux   dot    end",
        "one two three four five six seven eight nine ten eleven twelve",
    ],
)
def test_every_split_of_every_position_gives_the_same_holds(text: str) -> None:
    expected = [chain_hold(text[:k]) for k in range(1, len(text) + 1)]
    assert holds(list(text)) == expected
    for cut in range(1, len(text)):
        # two deltas, the second starting at every position, and the buffer cut just before it
        assert holds([text[:cut], text[cut:]]) == [expected[cut - 1], expected[-1]]
        assert holds([text[:cut], text[cut:]], cut_at=[0, cut]) == [expected[cut - 1], expected[-1]]


PIECES = st.sampled_from(
    [
        "zhang", "san", "at", "dot", "a", "d", "do", "ate", "dots", "x.", ".y", "[at]", "(dot)",
        "{@}", "<", ">", "@", ".", "-", "_", "%", "+", "1", "com", " ", "  ", "   ", "    ", "\t",
        "\n", "\u3000", "\u00a0", ",", "!", "洗", "é", "e\u0301", "ﬁ",
    ]
)  # fmt: skip
TEXTS = st.lists(PIECES, max_size=30).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, data=st.data())
def test_random_splits_and_cuts_give_the_whole_text_holds(text: str, data: st.DataObject) -> None:
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(text))), max_size=8))))
    bounds = [0, *(c for c in cuts if c < len(text)), len(text)]
    deltas = [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    cut_at = data.draw(
        st.lists(st.integers(0, max(0, len(text))), min_size=len(deltas), max_size=len(deltas))
    )
    ends = [len("".join(deltas[: i + 1])) for i in range(len(deltas))]
    expected = [chain_hold(text[:end]) for end in ends]
    assert holds(deltas) == expected
    assert holds(deltas, cut_at=cut_at) == expected


def test_a_word_cut_by_the_head_of_the_buffer_is_not_taken_for_a_whole_one() -> None:
    """The buffer handed over starts inside "dot": its "t" is not a word that cannot bridge to
    "x" (the new text is long enough to look for a restart)."""
    first, second = "mail zhang do", "t x at at at at "
    assert holds([first, second], cut_at=[0, len(first)]) == [chain_hold(first), chain_hold(first + second)]
    assert chain_hold(first + second) == len("mail ")
