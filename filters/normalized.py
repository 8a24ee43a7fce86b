"""The normalized view of a text that every detector scans, with a map back to the original.

Normalization is per character: NFKC (full-width digits and letters become ASCII), format
characters (Unicode category Cf: zero-width space/joiners, bidi marks, soft hyphen) and the other
default-ignorable code points (the combining grapheme joiner U+034F, variation selectors U+FE0F
and U+E0100.., Hangul fillers, Mongolian free variation selectors) dropped, then the one-to-one
foldings of ``filters.confusables`` (every decimal digit to ASCII, dashes to ``-``, look-alike
letters to the ASCII letter) and case folding. Because each original character maps to its own run of normalized
characters, normalizing a concatenation equals concatenating the normalized parts, which the
stream filter relies on.

    original   "６２２２\u200b 0200"     (full-width digits, a zero-width space)
    normalized "6222 0200"
    starts     [0, 1, 2, 3, 5, 6, 7, 8, 9]   original index of each normalized character

A normalized span [a, b) covers the original span [starts[a], starts[b - 1] + 1); format
characters inside a match are therefore covered by its redaction.

Speed: most text (ASCII, CJK, full-width punctuation) maps one character to one character with
nothing that composes, so it is normalized by two numpy table lookups over its code points
(tens of M chars/s) and keeps identity offsets. A character is *simple* when its per-character
mapping is a single character and the NFKC image's decomposition starts with a starter that is
no composition's second part; a text of simple characters concatenates NFKC-normalized pieces
that cannot compose or reorder across their boundaries, so whole-text NFKC equals the
per-character mapping. Anything else takes the general path below.
"""

from __future__ import annotations

import functools
import sys
import unicodedata

import numpy as np
import numpy.typing as npt

from filters import confusables

_SAME, _ONE_TO_ONE, _GENERAL = 0, 1, 2
"""Per code point: unchanged and simple; mapped to one other simple character; anything else."""

# Hangul vowel and trailing jamo compose algorithmically (UAX #15), outside the decomposition data.
_HANGUL_SECONDS = (*range(0x1161, 0x1176), *range(0x11A8, 0x11C3))

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties.txt) outside category Cf: invisible
# when rendered, so a value with one inside looks intact to a reader and must to a detector.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul choseong / jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFFA0, 0xFFA0),  # half-width Hangul filler
    (0xFFF0, 0xFFF8),  # unassigned, reserved as ignorable
    (0xE0000, 0xE0FFF),  # tags and variation selectors 17-256
)


class _FoldTable:
    """Per-character normalization of every code point that changes, built once (~0.3 s)."""

    def __init__(self) -> None:
        self.table: dict[int, str | None] = {}
        changing_length = []
        nfkc_images: dict[int, str] = {}
        seconds = set(_HANGUL_SECONDS)
        first_of: dict[int, int] = {}
        marks: set[int] = set()
        for cp in range(sys.maxunicode + 1):
            ch = chr(cp)
            category = unicodedata.category(ch)
            if category == "Cf" or any(lo <= cp <= hi for lo, hi in _IGNORABLE_RANGES):
                self.table[cp] = None
                changing_length.append(ch)
                continue
            if category in ("Cn", "Co"):
                continue  # unassigned and private use: no decomposition, no case
            if unicodedata.combining(ch):
                marks.add(cp)
            decomposition = unicodedata.decomposition(ch)
            if decomposition:
                parts = decomposition.split()
                if not parts[0].startswith("<") and len(parts) == 2:
                    seconds.add(int(parts[1], 16))
                first_of[cp] = ord(unicodedata.normalize("NFKD", ch)[0])
            nfkc = unicodedata.normalize("NFKC", ch)
            mapped = confusables.fold(nfkc)
            if nfkc != ch:
                nfkc_images[cp] = nfkc
            if mapped != ch:
                self.table[cp] = mapped
                if len(mapped) != 1:
                    changing_length.append(ch)
        self.changes_length = frozenset(changing_length)
        self.kind, self.single = self._arrays(nfkc_images, seconds, first_of, marks)

    def _arrays(
        self, nfkc_images: dict[int, str], seconds: set[int], first_of: dict[int, int], marks: set[int]
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint32]]:
        def starts_clean(ch: str) -> bool:
            first = first_of.get(ord(ch), ord(ch))
            return first not in seconds and unicodedata.combining(chr(first)) == 0

        kind = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
        kind[0xD800:0xE000] = _GENERAL  # lone surrogates: leave them to the general path
        for cp in first_of.keys() | seconds | marks:
            kind[cp] = _SAME if starts_clean(chr(cp)) else _GENERAL
        single = np.arange(sys.maxunicode + 1, dtype=np.uint32)
        for cp, mapped in self.table.items():
            image = nfkc_images.get(cp, chr(cp))
            if mapped is None or len(mapped) != 1 or not all(starts_clean(ch) for ch in image):
                kind[cp] = _GENERAL
            else:
                kind[cp] = _ONE_TO_ONE
                single[cp] = ord(mapped)
        for cp, image in nfkc_images.items():
            if not all(starts_clean(ch) for ch in image):
                kind[cp] = _GENERAL
        return kind, single


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
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    kind = int(np.take(fold.kind, code_points).max())
    if kind == _SAME:
        return NormalizedText(text, text, None)
    if kind == _ONE_TO_ONE:
        folded = np.take(fold.single, code_points).tobytes().decode("utf-32-le")
        return NormalizedText(text, folded, None)
    return _normalize_general(text, fold)


def _normalize_general(text: str, fold: _FoldTable) -> NormalizedText:
    if fold.changes_length.isdisjoint(text):
        # No character changes length on its own, so whole-string NFKC differs from the
        # per-character mapping only by composing a combining sequence (shorter) or
        # reordering combining marks (same length, same offsets for every detector's purpose).
        folded = confusables.fold(unicodedata.normalize("NFKC", text))
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
