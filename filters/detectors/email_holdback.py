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

The chain is kept up to date character by character, so a delta costs its own length.
"""

from __future__ import annotations

import re

from filters.holdback import Quiet, TriggerWatch

__all__ = ["EmailHoldback"]

_PIECES = re.compile(r"([a-z0-9._%+\-@\[\](){}<>]+)|(\s+)|[^a-z0-9._%+\-@\[\](){}<>\s]+")
"""Characters an address can hold, whitespace, and anything else (which ends every chain)."""
_WORD = re.compile(r"[a-z0-9._%+\-@\[\](){}<>]+")
"""New text that only continues the word being read."""
_CONNECTORS = frozenset({"at", "dot"})
_TOUCHING = frozenset("[](){}<>@.")
_UNFINISHED = frozenset({"", "a", "d", "do"})
"""Words that may still become a connector."""
_MAX_GAP = 3
_TRIGGER = re.compile(r"@|(?<![a-z0-9])at(?![a-z0-9])")


class _Word:
    __slots__ = ("chain", "first", "head", "last", "start")

    def __init__(self, start: int, chars: str) -> None:
        self.start = start
        self.chain = start
        """Where the chain this word ends begins."""
        self.head = chars[:4]
        """The first four characters: enough to tell a connector."""
        self.first = chars[0]
        self.last = chars[-1]

    def extend(self, chars: str) -> None:
        if len(self.head) < 4:
            self.head = (self.head + chars)[:4]
        self.last = chars[-1]

    @property
    def is_connector(self) -> bool:
        return self.head in _CONNECTORS


def _bridges(before: _Word, after: _Word) -> bool:
    """Can an address run across the gap between ``before`` and ``after``?"""
    return before.is_connector or before.last in _TOUCHING or after.is_connector or after.first in _TOUCHING


class EmailHoldback:
    __slots__ = ("_gap", "_max_keep", "_prev", "_trigger", "_word")

    def __init__(self, max_match_len: int) -> None:
        self._max_keep = max_match_len - 1
        self._word: _Word | None = None
        """The word being read (the stream ends inside it)."""
        self._prev: _Word | None = None
        """The word before the current gap or word, when an address could run across."""
        self._gap = 0
        self._trigger = TriggerWatch(_TRIGGER, len("at") + 1, lookahead=1, needles=("@", "at"))

    def advance(self, text: str, base: int, begin: int) -> int:
        self._trigger.read(text, base, begin)
        word = self._word
        if word is not None and len(word.head) == 4 and _WORD.fullmatch(text, begin - base) is not None:
            word.last = text[-1]  # the word goes on: its chain and the hold point stay
            return max(self._hold(base + len(text)), base + len(text) - self._max_keep)
        for piece in _PIECES.finditer(text, begin - base):
            if piece.lastindex == 1:
                if self._word is None:
                    self._word = _Word(base + piece.start(), piece.group())
                else:
                    self._word.extend(piece.group())
            elif piece.lastindex == 2:
                self._close_word()
                self._gap += piece.end() - piece.start()
                if self._gap > _MAX_GAP:
                    self._prev = None
            else:
                self._word = self._prev = None
                self._gap = 0
        return max(self._hold(base + len(text)), base + len(text) - self._max_keep)

    def _close_word(self) -> None:
        word = self._word
        if word is None:
            return
        if self._prev is not None and _bridges(self._prev, word):
            word.chain = self._prev.chain
        self._prev = word
        self._word = None
        self._gap = 0

    def _hold(self, n: int) -> int:
        word, prev = self._word, self._prev
        if word is not None:
            if prev is not None and (_bridges(prev, word) or word.head in _UNFINISHED):
                return prev.chain
            return word.start
        if prev is not None:  # whitespace at the end: the next word may be a connector
            return prev.chain
        return n

    @property
    def quiet(self) -> Quiet | None:
        return None  # every word may begin an address

    def may_match(self, start: int) -> bool:
        return self._trigger.latest >= start
