"""How far a stream holds back for the e-mail detector: the trailing chain of words that could
still be one address.

An address is one word (``zhang.san@example.com``) or several joined across short whitespace
by a connector (``zhang [at] example [dot] com``, ``zhang at example dot com``): whitespace
inside an address always touches ``at``, ``dot``, a bracket, ``@`` or ``.``. So the address
that could still change is the last word, extended back over every gap of at most three
whitespace characters that touches a connector (the last word also when it may still become
one: ``a``, ``do``, or nothing yet after a trailing space). Any other character (a CJK
character, ``,``, ``!``) ends every chain:

    "please write to zhang at exa"    hold from "zhang" ("at" touches both gaps)
    "please write to me"              hold from "me"

The chain is kept up to date piece by piece (a word, a gap, a run of other characters), so a
delta costs its own length. Most of a long delta need not be read piece by piece: where the
state of the chain no longer depends on the text before (a *restart*), reading on from a fresh
state gives what reading everything would, so one regex finds the last restart of the new text
and the pieces after it are all that is read in Python:

    "... the heads split the work, and the output"
                                         ^ restart: "and" and "the" cannot bridge, "the" is closed

A restart is after a character that ends every chain, after four whitespace characters, or at
the start of a closed word that cannot bridge to the word before it.
"""

from __future__ import annotations

import re

from filters.holdback import Quiet, TriggerWatch

__all__ = ["EmailHoldback"]

_PIECES = re.compile(r"([a-z0-9._%+\-@\[\](){}<>]+)|(\s+)|[^a-z0-9._%+\-@\[\](){}<>\s]+")
"""Characters an address can hold, whitespace, and anything else (which ends every chain)."""
_WORD = re.compile(r"[a-z0-9._%+\-@\[\](){}<>]+")
"""New text that only continues the word being read."""
_RESTART = re.compile(
    r"(?s:.*)(?:[^a-z0-9._%+\-@\[\](){}<>\s]|\s{4}"
    r"|(?<![a-z0-9._%+\-@\[\](){}<>])(?!(?:at|dot)\s)[a-z0-9._%+\-@\[\](){}<>]*+(?<=[a-z0-9_%+\-])\s+"
    r"(?=(?!(?:at|dot)\s)[a-z0-9_%+\-][a-z0-9._%+\-@\[\](){}<>]*+\s))"
)
"""Ends at the last restart (module docstring): after a character that ends every chain, after
four whitespace characters, or where a closed word starts (not ``at`` or ``dot``, not a touching
first character) after a word that cannot bridge to it (not ``at`` or ``dot``, not a touching
last character). ``(?s:.*)`` gives back one character at a time from the end, so the first
place that fits is the last one."""
_MIN_RESTART = 16
"""New text shorter than this is read piece by piece from the start (bench/BENCHMARKS.md)."""
_CONNECTORS = frozenset({"at", "dot"})
_TOUCHING = frozenset("[](){}<>@.")
_UNFINISHED = frozenset({"", "a", "d", "do"})
"""Words that may still become a connector."""
_MAX_GAP = 3
_TRIGGER = re.compile(r"@|(?<![a-z0-9])at(?![a-z0-9])")


class EmailHoldback:
    """The chain's state is a few fields rather than an object per word: a long answer has one
    word every few characters."""

    __slots__ = (
        "_first",
        "_gap",
        "_head",
        "_is_open",
        "_last",
        "_max_keep",
        "_prev_chain",
        "_prev_joins",
        "_start",
        "_trigger",
    )

    def __init__(self, max_match_len: int) -> None:
        self._max_keep = max_match_len - 1
        self._is_open = False
        """The stream ends inside a word: the fields below describe it."""
        self._start = 0
        self._head = ""
        """Its first four characters: enough to tell a connector."""
        self._first = ""
        self._last = ""
        self._prev_chain: int | None = None
        """Where the chain of the word before the current gap or word begins, when an address
        could run across that gap; None when it cannot."""
        self._prev_joins = False
        """That word bridges any gap of its own accord (a connector, a touching last character)."""
        self._gap = 0
        self._trigger = TriggerWatch(_TRIGGER, len("at") + 1, lookahead=1, needles=("@", "at"))

    def advance(self, text: str, base: int, begin: int) -> int:
        self._trigger.read(text, base, begin)
        start = begin - base
        n = base + len(text)
        if self._is_open and len(self._head) == 4 and _WORD.fullmatch(text, start) is not None:
            self._last = text[-1]  # the word goes on: its chain and the hold point stay
            return max(self._hold(n), n - self._max_keep)
        # A short delta has no restart worth the search. A word before ``start`` reaches into
        # the match only through the look-behind, which needs the character before it: at the
        # head of a cut buffer, do not restart.
        if (
            len(text) - start >= _MIN_RESTART
            and (start or not base)
            and (restart := _RESTART.match(text, start)) is not None
        ):
            self._is_open = False
            self._prev_chain = None
            self._gap = 0
            start = restart.end()
        for piece in _PIECES.finditer(text, start):
            kind = piece.lastindex
            if kind == 1:
                chars = piece.group()
                if not self._is_open:
                    self._is_open = True
                    self._start = base + piece.start()
                    self._head = chars[:4]
                    self._first = chars[0]
                elif len(self._head) < 4:
                    self._head = (self._head + chars)[:4]
                self._last = chars[-1]
            elif kind == 2:
                if self._is_open:
                    self._close_word()
                self._gap += piece.end() - piece.start()
                if self._gap > _MAX_GAP:
                    self._prev_chain = None
            else:
                self._is_open = False
                self._prev_chain = None
                self._gap = 0
        return max(self._hold(n), n - self._max_keep)

    def _bridges_back(self) -> bool:
        """Can an address run across the gap between the word before and the open word?"""
        return self._prev_joins or self._head in _CONNECTORS or self._first in _TOUCHING

    def _close_word(self) -> None:
        chain = self._prev_chain
        if chain is None or not self._bridges_back():
            chain = self._start
        self._prev_chain = chain
        self._prev_joins = self._head in _CONNECTORS or self._last in _TOUCHING
        self._is_open = False
        self._gap = 0

    def _hold(self, n: int) -> int:
        prev_chain = self._prev_chain
        if self._is_open:
            if prev_chain is not None and (self._bridges_back() or self._head in _UNFINISHED):
                return prev_chain
            return self._start
        if prev_chain is not None:  # whitespace at the end: the next word may be a connector
            return prev_chain
        return n

    @property
    def quiet(self) -> Quiet | None:
        return None  # every word may begin an address

    def may_match(self, start: int) -> bool:
        return self._trigger.latest >= start
