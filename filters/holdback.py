"""What a stream must still hold back for one detector: the earliest place a match could change.

A detector's ``Holdback`` reads the normalized stream once, as it arrives, and answers with a
*hold point* h: every match that starts before h is final (more text can neither add, remove
nor change one), so the stream filter may release everything before h as far as this detector
is concerned. State is carried from one delta to the next; each call reads the new characters
and a constant number before them, never the whole held text again.

The common strategy is a *run*: the trailing stretch of characters a match can consist of
(digits and separators for a card, ``[0-9.]`` for an IPv4 address). A match that could still
change must reach the end of the stream, so it lies inside that run, and it starts at a
*marker* (a digit, ``<``, two letters and two digits ...). The hold point is the run's first
marker, or the start of a marker cut off by the end of the stream, or the end of the stream:

    stream   "... call me on 415 555 26"     class [0-9 .()+\\-xet], marker [0-9+(]
    run                     " 415 555 26"   (the "n" before it is not in the class)
    hold                     ^ first marker

Whatever the strategy says, no hold point is earlier than ``n - (max_match_len - 1)``: a match
spans at most ``max_match_len`` characters and must contain one that is still to come (the
argument the old windowed stream filter made for every detector at once). Only the private-key
block of ``secret`` is exempt, as its match runs to the ``END`` line however far away.

Positions are absolute indices into the normalized stream; ``text`` holds it from ``base`` on.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Protocol

__all__ = ["WHITESPACE", "CapHoldback", "Holdback", "Quiet", "RunHoldback", "RunRule"]

WHITESPACE = "".join(ch for ch in map(chr, range(0x3001)) if re.fullmatch(r"\s", ch))
"""Every character ``\\s`` matches (none lies above U+3000)."""


class Holdback(Protocol):
    """A holdback may also say ``holds_forward = True``: its hold point never moves back,
    however the text is split into reads (``filters.detector_cursor``)."""

    def advance(self, text: str, base: int, begin: int) -> int:
        """Read the new characters ``[begin, base + len(text))``; return the hold point."""
        ...

    def may_match(self, start: int) -> bool:
        """Could a match start at or after ``start`` in what was read? False lets the caller skip
        scanning; True is always safe."""
        ...

    @property
    def quiet(self) -> Quiet | None:
        """While nothing is under way (no marker held, no match pending): what new text must
        lack for that to stay so, and how far the hold point may then lag the end; None when
        any text may change it."""
        ...


@dataclass(frozen=True, slots=True)
class Quiet:
    """What lets a stream leave an idle holdback unread (``filters.detector_cursor``).

    Promise: if the holdback is idle and ``may_match(scanned_to)`` is False, and the text that
    arrives after its last read is not empty and holds no ``wake`` character and no ``marker``,
    then reading that text finds no match and leaves the hold point at or after
    ``n - keep`` and after the last character ``outside`` matches (when ``keep`` > 0; at ``n``
    when ``keep`` is 0). So the stream reads it only when it must know the hold point exactly."""

    wake: frozenset[str]
    keep: int = 0
    """The most characters a cut-off marker at the end holds back while idle."""
    outside: re.Pattern[str] | None = None
    """A character a held cut-off never contains (it lies in the trailing run of the others)."""
    marker: re.Pattern[str] | None = None
    """Something that ends the idle state besides ``wake`` characters (a token prefix of letters)."""
    marker_len: int = 1
    """The longest text ``marker`` matches: it is looked for from that many characters before
    the new text, so one cut by a delta boundary is seen."""

    def __post_init__(self) -> None:
        if self.keep < 0 or self.marker_len < 1:
            raise ValueError("keep must be >= 0 and marker_len positive")


class TriggerWatch:
    """Where a detector's *trigger* (something every match contains, or has just before it)
    last occurred, kept up to date from the new characters and ``width - 1`` before them.

    An occurrence whose look-ahead reaches past the end may still be undone ("at" that becomes
    "attention"): it counts until the next read, which reads it again."""

    __slots__ = ("_finditer", "_last", "_lookahead", "_needles", "_tentative", "_width", "last")

    def __init__(
        self, pattern: re.Pattern[str], width: int, lookahead: int = 0, needles: tuple[str, ...] = ()
    ) -> None:
        self._needles = needles
        """Strings every occurrence contains one of (empty: none known): text without them is
        read without running the pattern."""
        self._last = _last_of(pattern)
        self._finditer = pattern.finditer
        self._width = width
        """The longest text the pattern matches, its look-ahead included."""
        self._lookahead = lookahead
        """Characters after an occurrence that its look-ahead reads."""
        self.last = -1
        """The last occurrence that more text cannot undo."""
        self._tentative = -1

    def __repr__(self) -> str:
        return f"TriggerWatch(last={self.last})"

    @property
    def latest(self) -> int:
        """The last place the trigger may occur."""
        return max(self.last, self._tentative)

    def read(self, text: str, base: int, begin: int) -> None:
        lo = max(0, begin - base - self._width + 1)
        if self._needles:
            for needle in self._needles:
                if text.find(needle, lo) != -1:
                    break
            else:
                self._tentative = -1
                return
        found = self._last.match(text, lo)
        self._tentative = -1
        if found is None:
            return
        if found.end(1) + self._lookahead <= len(text):
            self.last = max(self.last, base + found.start(1))
            return
        self._tentative = base + found.start(1)
        decided = [f.start() for f in self._finditer(text, lo) if f.end() + self._lookahead <= len(text)]
        if decided:
            self.last = max(self.last, base + decided[-1])


@functools.lru_cache(maxsize=64)
def _last_of(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """Matches up to the pattern's last occurrence (group 1): ``.*`` gives back one character at
    a time from the end, so the first place the pattern fits is the last one."""
    return re.compile(rf"(?s:.*)({pattern.pattern})", pattern.flags)


class CapHoldback:
    """Holds back ``max_match_len - 1`` characters: for a detector that offers nothing better."""

    __slots__ = ("_keep",)

    def __init__(self, max_match_len: int) -> None:
        self._keep = max_match_len - 1

    def advance(self, text: str, base: int, begin: int) -> int:
        return max(base, base + len(text) - self._keep)

    def may_match(self, start: int) -> bool:
        return True

    @property
    def quiet(self) -> Quiet | None:
        return None


@dataclass(frozen=True, slots=True)
class RunRule:
    """The shape of a detector's matches, as ``RunHoldback`` reads them."""

    members: str
    """Every character a match (and the look-ahead that decides it) can consist of."""
    marker: re.Pattern[str]
    """What every match starts with."""
    max_match_len: int
    marker_len: int = 1
    """Characters of the marker (the pattern matches exactly this many)."""
    partial: re.Pattern[str] | None = None
    """A marker cut off by the end of the stream (anchored with ``\\Z``); None when one character."""
    trigger: re.Pattern[str] | None = None
    """Something every match contains; None: always scan."""
    trigger_len: int = 1
    """The longest text ``trigger`` matches."""
    wake: frozenset[str] = frozenset()
    """Characters every marker and every trigger contains at least one of. While no marker is
    held, text without any of them only moves the hold point (to the end of the stream, or to a
    cut-off marker), so that is all the holdback does; empty: always read the text."""
    partial_chars: str = ""
    """Every character a cut-off marker can consist of, where fewer than ``members`` (an IBAN's
    country code has no space): an idle stream's hold point is after the last other one.
    Empty: ``members``."""

    def __post_init__(self) -> None:
        if self.marker_len < 1 or self.max_match_len < 1:
            raise ValueError("marker_len and max_match_len must be positive")
        if self.marker_len > 1 and self.partial is None:
            raise ValueError("a marker of several characters needs a pattern for its cut-off form")


class RunHoldback:
    """Holds back from the first marker of the trailing run (module docstring)."""

    __slots__ = ("_idle_quiet", "_last_marker", "_marker_at", "_rule", "_run_start", "_trigger", "_wake")

    def __init__(self, rule: RunRule) -> None:
        self._rule = rule
        self._run_start = 0
        self._marker_at: int | None = None
        """The first marker of the trailing run (later ones are not looked for)."""
        self._last_marker = -1
        """The last place a marker may start, in runs that ended."""
        self._trigger = None if rule.trigger is None else TriggerWatch(rule.trigger, rule.trigger_len)
        self._wake = _wake_of(rule.wake) if rule.wake else None
        self._idle_quiet = _quiet_of(rule) if rule.wake else None

    def advance(self, text: str, base: int, begin: int) -> int:
        rule = self._rule
        n = base + len(text)
        stop = begin - base
        if self._marker_at is None and self._wake is not None and self._wake.search(text, stop) is None:
            return self._quiet(text, base, stop)
        if self._trigger is not None:
            self._trigger.read(text, base, begin)
        i = stop + len(text[stop:].rstrip(rule.members))
        if i > stop:  # the run broke inside the new text: a new one starts after the break
            if self._marker_at is not None or rule.marker.search(
                text, max(self._run_start, begin - (rule.marker_len - 1), base) - base, i
            ):
                self._last_marker = base + i - 1
            self._run_start = base + i
            self._marker_at = None
            lo = base + i
        else:
            lo = max(self._run_start, begin - (rule.marker_len - 1), base)
        if self._marker_at is None and lo < n:
            found = rule.marker.search(text, lo - base)
            if found is not None:
                self._marker_at = base + found.start()
        if self._marker_at is not None:
            hold = self._marker_at
        elif rule.partial is not None:
            cut = rule.partial.search(text, max(0, self._run_start - base, len(text) - rule.marker_len + 1))
            hold = n if cut is None else base + cut.start()
        else:
            hold = n
        return max(hold, n - (rule.max_match_len - 1))

    def _quiet(self, text: str, base: int, stop: int) -> int:
        """``advance`` for new text without a wake character while no marker is held: no marker
        or trigger can occur in it, so only the run and a cut-off marker at the end matter."""
        rule = self._rule
        i = stop + len(text[stop:].rstrip(rule.members))
        if i > stop:
            self._run_start = base + i
        n = base + len(text)
        if rule.partial is None:
            return n
        cut = rule.partial.search(text, max(0, self._run_start - base, len(text) - rule.marker_len + 1))
        return max(n if cut is None else base + cut.start(), n - (rule.max_match_len - 1))

    def may_match(self, start: int) -> bool:
        """Every match starts at a marker and contains the trigger (when there is one)."""
        if self._trigger is not None and self._trigger.latest < start:
            return False
        return self._marker_at is not None or self._last_marker >= start

    @property
    def is_idle(self) -> bool:
        """No marker in the trailing run."""
        return self._marker_at is None

    @property
    def quiet(self) -> Quiet | None:
        """Idle, text without a wake character leaves no marker and no trigger (``_quiet``); a
        cut-off marker lies in the trailing run and is shorter than a marker."""
        return self._idle_quiet if self._marker_at is None else None


@functools.lru_cache(maxsize=64)
def _quiet_of(rule: RunRule) -> Quiet:
    return Quiet(
        wake=rule.wake, keep=rule.marker_len - 1, outside=_outside(rule.partial_chars or rule.members)
    )


@functools.lru_cache(maxsize=64)
def _wake_of(wake: frozenset[str]) -> re.Pattern[str]:
    """Any of the ``wake`` characters: built once per rule, not per stream."""
    return re.compile("[" + re.escape("".join(sorted(wake))) + "]")


@functools.lru_cache(maxsize=64)
def _outside(members: str) -> re.Pattern[str]:
    """Any character not among ``members``."""
    return re.compile("[^" + re.escape(members) + "]")
