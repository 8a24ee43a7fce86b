"""The one interface every detector implements, and the span type it returns."""

from __future__ import annotations

from typing import Protocol

Span = tuple[int, int]
"""[start, end) in the normalized text."""


class Detector(Protocol):
    """Finds one kind of sensitive value in normalized text (``filters.normalized``: NFKC, ASCII
    digits and dashes, look-alike letters folded, invisible characters dropped, case-folded).

    ``scan`` must be linear in the text: a prompt may be as long as the body limit.

    ``max_match_len`` bounds the normalized length of any span ``scan`` can return, plus the
    characters after it that decide whether it is one; the stream filter holds back
    ``max_match_len - 1`` characters on it, so it must be a true bound.
    ``priority`` settles overlaps: the higher-priority span wins, then the longer one.
    """

    @property
    def name(self) -> str: ...

    @property
    def max_match_len(self) -> int: ...

    @property
    def priority(self) -> int: ...

    def scan(self, text: str) -> list[Span]: ...
