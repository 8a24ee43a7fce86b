"""Apply redact, mask and block matches to the original text."""

from __future__ import annotations

from collections.abc import Iterable

from filters.action import Action
from filters.masker import mask
from filters.normalized import NormalizedText
from filters.scanner import Match

FAILED_PLACEHOLDER = "[REDACTED:FILTER_ERROR]"


def placeholder(detector: str) -> str:
    return f"[REDACTED:{detector.upper()}]"


def rewrite(norm: NormalizedText, matches: Iterable[Match], begin: int = 0, end: int | None = None) -> str:
    """The original text in [begin, end) with every rewriting match applied.

    A match that starts before ``begin`` (its head was already released or replaced) or ends
    after ``end`` (it runs on into the next text of a conversation) only has its part inside
    replaced, and a masked part keeps no edge. Blocked values are redacted too, so the result is
    always safe.
    """
    spans = [(*norm.to_original(m.start, m.end), m.detector, m.action) for m in matches if m.action.rewrites]
    return rewrite_original(norm.original, spans, begin, len(norm.original) if end is None else end)


def rewrite_original(
    original: str, spans: Iterable[tuple[int, int, str, Action]], begin: int, end: int, offset: int = 0
) -> str:
    """``rewrite`` for spans already in original offsets; ``original`` starts at ``offset``."""
    pieces: list[str] = []
    pos = begin
    for start, finish, detector, action in spans:
        if not action.rewrites:
            continue
        is_whole = begin <= start and finish <= end
        start, finish = max(start, pos), min(finish, end)
        if finish <= start:
            continue
        pieces.append(original[pos - offset : start - offset])
        if action is Action.MASK:
            pieces.append(mask(detector, original[start - offset : finish - offset], is_whole=is_whole))
        else:
            pieces.append(placeholder(detector))
        pos = finish
    pieces.append(original[pos - offset : end - offset])
    return "".join(pieces)
