"""The normalized view of a text that every detector scans, with a map back to the original.

Normalization is per character: NFKC (full-width digits and letters become ASCII), format
characters (Unicode category Cf: zero-width space/joiners, bidi marks, soft hyphen) dropped,
then case folded. Because each original character maps to its own run of normalized
characters, normalizing a concatenation equals concatenating the normalized parts, which the
stream filter relies on.

    original   "６２２２\u200b 0200"     (full-width digits, a zero-width space)
    normalized "6222 0200"
    starts     [0, 1, 2, 3, 5, 6, 7, 8, 9]   original index of each normalized character

A normalized span [a, b) covers the original span [starts[a], starts[b - 1] + 1); format
characters inside a match are therefore covered by its redaction.
"""

from __future__ import annotations

import functools
import sys
import unicodedata


class _FoldTable:
    """Per-character normalization of every code point that changes, built once (~1 s)."""

    def __init__(self) -> None:
        self.table: dict[int, str | None] = {}
        changing_length = []
        for cp in range(sys.maxunicode + 1):
            ch = chr(cp)
            if unicodedata.category(ch) == "Cf":
                self.table[cp] = None
                changing_length.append(ch)
                continue
            mapped = unicodedata.normalize("NFKC", ch).casefold()
            if mapped != ch:
                self.table[cp] = mapped
                if len(mapped) != 1:
                    changing_length.append(ch)
        self.changes_length = frozenset(changing_length)


@functools.cache
def _fold_table() -> _FoldTable:
    return _FoldTable()


class NormalizedText:
    """A normalized text plus, unless it is identical in length, its original offsets."""

    __slots__ = ("original", "starts", "text")

    def __init__(self, original: str, text: str, starts: list[int] | None) -> None:
        self.original = original
        self.text = text
        self.starts = starts
        """None when normalized index == original index (the common, fast case)."""

    def __repr__(self) -> str:
        return f"NormalizedText(len={len(self.text)}, original_len={len(self.original)})"

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty normalized span to the original span that produced it."""
        if self.starts is None:
            return start, end
        return self.starts[start], self.starts[end - 1] + 1

    def original_index(self, index: int) -> int:
        """Original index where normalized character ``index`` comes from (len for the end)."""
        if self.starts is None:
            return index
        if index >= len(self.text):
            return len(self.original)
        return self.starts[index]


def normalize(text: str) -> NormalizedText:
    if text.isascii():
        return NormalizedText(text, text.lower(), None)
    fold = _fold_table()
    if fold.changes_length.isdisjoint(text):
        # No character changes length on its own, so whole-string NFKC differs from the
        # per-character mapping only by composing a combining sequence (shorter) or
        # reordering combining marks (same length, same offsets for every detector's purpose).
        folded = unicodedata.normalize("NFKC", text).casefold()
        if len(folded) == len(text):
            return NormalizedText(text, folded, None)
    return _normalize_slow(text, fold.table)


def _normalize_slow(text: str, table: dict[int, str | None]) -> NormalizedText:
    pieces: list[str] = []
    starts: list[int] = []
    for i, ch in enumerate(text):
        piece = table.get(ord(ch), ch)
        if piece is None:
            continue
        pieces.append(piece)
        if len(piece) == 1:
            starts.append(i)
        else:
            starts.extend([i] * len(piece))
    return NormalizedText(text, "".join(pieces), starts)
