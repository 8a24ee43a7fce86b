"""The interface every detector implements, the span type it returns, and what a detector adds
to be filtered incrementally in a stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from filters.holdback import Holdback

Span = tuple[int, int]
"""[start, end) in the normalized text."""


class Detector(Protocol):
    """Finds one kind of sensitive value in normalized text (``filters.normalized``: NFKC, ASCII
    digits and dashes, look-alike letters folded, invisible characters dropped, case-folded).

    ``scan`` must be linear in the text: a prompt may be as long as the body limit.

    ``max_match_len`` bounds the normalized length of any span ``scan`` can return, plus the
    characters after it that decide whether it is one; the stream filter holds back at most
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


class IncrementalDetector(Detector, Protocol):
    """A detector the stream filter can run on new text only (``filters.detector_cursor``).

    ``scan_from(text, start)`` returns exactly the spans of ``scan(text)`` that start at or
    after ``start``, reading at most ``lookbehind`` characters before ``start`` and the text
    after it. ``holdback()`` gives a fresh per-stream ``Holdback`` that says, delta by delta,
    from where its matches could still change. A detector may also offer
    ``scan_start(text, start)``, the first character ``scan_from`` reads, where it knows that
    better than its worst case (a digit run's first digit). A detector without these is held
    back by its ``max_match_len`` and rescanned with that much context.
    """

    @property
    def lookbehind(self) -> int: ...

    def scan_from(self, text: str, start: int) -> list[Span]: ...

    def holdback(self) -> Holdback: ...
