"""Keyword lists (Chinese and English, tens of thousands of terms) matched with Aho-Corasick.

Matching runs on a *skeleton*: the normalized text with every separator (whitespace,
punctuation, symbols, underscore) removed, so "法 轮-功" and "b.o.m.b" still match. Skeleton
hits are mapped back to normalized offsets; a hit is kept only if at most ``max_gap``
separators sit between consecutive characters on average (which also bounds
``max_match_len`` for the stream filter), and an ASCII term must start and end on a word
boundary, so "kill" does not fire inside "skill".

    normalized  "b . o m b!"      skeleton "bomb"     kept [0, 2, 4, 5]
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import ahocorasick_rs
import numpy as np
import numpy.typing as npt

from filters.detector import Span
from filters.detectors.keyword_holdback import KeywordHoldback
from filters.detectors.term_automaton import TermAutomaton
from filters.errors import PolicyError
from filters.normalized import normalize

_SEPARATORS = re.compile(r"[\W_]+")


@functools.cache
def _is_separator() -> npt.NDArray[np.bool_]:
    """Per code point: does ``_SEPARATORS`` match it (taken from the regex itself, ~0.1 s)."""
    every_char = "".join(map(chr, range(sys.maxunicode + 1)))
    table = np.zeros(sys.maxunicode + 1, dtype=np.bool_)
    for match in _SEPARATORS.finditer(every_char):
        table[match.start() : match.end()] = True
    return table


@functools.lru_cache(maxsize=4)
def _skeleton(text: str) -> tuple[str, npt.NDArray[np.intp] | None]:
    """The skeleton and the normalized index of each of its characters (None: nothing removed).

    Cached: the keyword and prompt-injection detectors scan the same text in turn."""
    if text.isascii() and text.isalnum():
        return text, None
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    is_separator = np.take(_is_separator(), code_points)
    if not is_separator.any():
        return text, None
    kept = np.flatnonzero(~is_separator)
    return np.take(code_points, kept).tobytes().decode("utf-32-le", "surrogatepass"), kept


def skeleton(text: str) -> str:
    """The text without separators (whitespace, punctuation, symbols, underscore)."""
    return _skeleton(text)[0]


def read_terms(path: Path) -> list[str]:
    """One term per line; blank lines and lines starting with ``#`` are ignored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read keyword file {path.name}: {type(exc).__name__}") from exc
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


class KeywordDetector:
    def __init__(self, name: str, terms: Iterable[str], *, priority: int = 10, max_gap: int = 3) -> None:
        self._name = name
        self._priority = priority
        self._max_gap = max_gap
        _is_separator()  # built here (~0.1 s) rather than on the first request
        unique = sorted({skeleton(normalize(term).text) for term in terms} - {""})
        self._terms = unique
        self._is_word = [term.isascii() for term in unique]
        self._automaton = ahocorasick_rs.AhoCorasick(unique) if unique else None
        longest = max((len(t) for t in unique), default=1)
        self._max_match_len = longest + (longest - 1) * max_gap
        self._stream_automaton: TermAutomaton | None = None
        """Built on the first stream (a Python automaton costs more to build than the Rust one)."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def max_match_len(self) -> int:
        return self._max_match_len

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def num_terms(self) -> int:
        return len(self._terms)

    @property
    def lookbehind(self) -> int:
        return 1  # the word boundary before an ASCII term

    def __repr__(self) -> str:
        return f"KeywordDetector(name={self._name!r}, num_terms={len(self._terms)})"

    def holdback(self) -> KeywordHoldback:
        if self._stream_automaton is None:
            self._stream_automaton = TermAutomaton(self._terms)
        return KeywordHoldback(self._stream_automaton, self._max_match_len)

    def scan_from(self, text: str, start: int) -> list[Span]:
        """Skeleton hits are found wherever they are, so scanning from the character before
        ``start`` (its word boundary) finds every span that starts at ``start`` or later."""
        lo = max(0, start - 1)
        return [(s + lo, e + lo) for s, e in self.scan(text[lo:]) if s + lo >= start]

    def scan(self, text: str) -> list[Span]:
        if self._automaton is None:
            return []
        skel, kept = _skeleton(text)
        hits = self._automaton.find_matches_as_indexes(skel, overlapping=True)
        if not hits:
            return []
        spans: list[Span] = []
        for index, start, end in hits:
            if kept is None:
                n_start, n_end = start, end
            else:
                n_start, n_end = int(kept[start]), int(kept[end - 1]) + 1
            length = end - start
            if n_end - n_start > length + (length - 1) * self._max_gap:
                continue
            if self._is_word[index] and not _on_word_boundary(text, n_start, n_end):
                continue
            spans.append((n_start, n_end))
        return spans


def _on_word_boundary(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isascii() and before.isalnum()) and not (after.isascii() and after.isalnum())
