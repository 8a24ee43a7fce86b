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
    original = norm.original
    stop = len(original) if end is None else end
    pieces: list[str] = []
    pos = begin
    for match in matches:
        if match.action is Action.FLAG:
            continue
        start, finish = norm.to_original(match.start, match.end)
        is_whole = begin <= start and finish <= stop
        start, finish = max(start, pos), min(finish, stop)
        if finish <= start:
            continue
        pieces.append(original[pos:start])
        if match.action is Action.MASK:
            pieces.append(mask(match.detector, original[start:finish], is_whole=is_whole))
        else:
            pieces.append(placeholder(match.detector))
        pos = finish
    pieces.append(original[pos:stop])
    return "".join(pieces)
