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

import bisect
import functools
import re
from collections.abc import Iterable
from pathlib import Path

import ahocorasick_rs

from filters.detector import Span
from filters.errors import PolicyError
from filters.normalized import normalize

_SEPARATORS = re.compile(r"[\W_]+")


@functools.lru_cache(maxsize=4)
def skeleton(text: str) -> str:
    """Cached: the keyword and prompt-injection detectors scan the same text in turn."""
    return _SEPARATORS.sub("", text)


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
        unique = sorted({skeleton(normalize(term).text) for term in terms} - {""})
        self._terms = unique
        self._is_word = [term.isascii() for term in unique]
        self._automaton = ahocorasick_rs.AhoCorasick(unique) if unique else None
        longest = max((len(t) for t in unique), default=1)
        self._max_match_len = longest + (longest - 1) * max_gap

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

    def __repr__(self) -> str:
        return f"KeywordDetector(name={self._name!r}, num_terms={len(self._terms)})"

    def scan(self, text: str) -> list[Span]:
        if self._automaton is None:
            return []
        skel = skeleton(text)
        hits = self._automaton.find_matches_as_indexes(skel, overlapping=True)
        if not hits:
            return []
        to_normalized = _SkeletonMap(text) if len(skel) != len(text) else None
        spans: list[Span] = []
        for index, start, end in hits:
            if to_normalized is None:
                n_start, n_end = start, end
            else:
                n_start, n_end = to_normalized(start), to_normalized(end - 1) + 1
            length = end - start
            if n_end - n_start > length + (length - 1) * self._max_gap:
                continue
            if self._is_word[index] and not _on_word_boundary(text, n_start, n_end):
                continue
            spans.append((n_start, n_end))
        return spans


class _SkeletonMap:
    """Skeleton index -> normalized index, from the separator runs (far fewer than characters)."""

    def __init__(self, text: str) -> None:
        self._skel_starts: list[int] = []
        self._removed: list[int] = []
        removed = 0
        for match in _SEPARATORS.finditer(text):
            self._skel_starts.append(match.start() - removed)
            removed += match.end() - match.start()
            self._removed.append(removed)

    def __call__(self, index: int) -> int:
        run = bisect.bisect_right(self._skel_starts, index) - 1
        return index + (self._removed[run] if run >= 0 else 0)


def _on_word_boundary(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isascii() and before.isalnum()) and not (after.isascii() and after.isalnum())
