"""Filtering a streamed response without ever sending a matched character, at a cost per delta
that grows with the delta, not with what is held back.

Invariant: a character is released only when no match can still include it. Each active
detector has a ``DetectorCursor`` whose hold point says from where its matches could still
change (``filters.holdback``: the trailing digits of a card, the word an address could begin
with, the start of an unfinished keyword); the stream releases up to the earliest hold point of
the detectors that rewrite text (block, redact, mask), moved left so that no match straddles it
and it starts an original character:

    normalized  | context | released now                   | held back                |
                base      released                         release = min hold        n
                                 final matches start here -^ (found once, by each cursor)

So clean prose is released as it arrives, and a detector that could still match holds back only
what it could still match, never more than its ``max_match_len - 1`` characters (an open
private-key block excepted: it runs to its ``END`` line). A cursor scans only the text after
its previous hold point, and not at all when nothing there could match, so a delta costs about
its own length. Matches become final in order; they are settled against each other (priority,
then length, as ``Scanner`` does), counted once and applied once. Normalization is per
character (``filters.normalized``), so each delta is normalized on its own.

Most cursors are idle most of the time (no digit for a card, no ``-`` or token prefix for a
secret): an idle cursor is not run on a delta without its wake characters as long as the
lower bound it gives on its hold point (``DetectorCursor.floor``) does not come before the
release point the others set; it reads what it missed, in one call, once it does, when the
wake characters come, before the buffer is cut and at the end. A busy cursor whose hold point
only ever moves forward (a keyword list's) likewise reads later while its last hold point lies
at or after that release. The release is the same as if every cursor had read every delta.

Context: characters before ``released`` stay in the buffer while a cursor may still read them
(its ``lookbehind``) and for at least the longest match, so look-behinds see what they would
in the whole text.

Blocking: once a final match's action is block, the step returns ``blocked`` and nothing
more is released, ever. A detector failure fails closed the same way (``on_error = block``),
or replaces everything held with a placeholder (``redact``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from common.finding import Finding
from filters.action import Action, Direction
from filters.context import StreamStep
from filters.detector_cursor import DetectorCursor
from filters.finding_tally import FindingTally
from filters.normalized import normalize
from filters.rewrite import FAILED_PLACEHOLDER, rewrite_original
from filters.scanner import Candidate, Match, Scanner
from filters.windowed_scan import SEGMENT_CHARS

__all__ = ["StreamFilter"]

_BLOCKED = StreamStep(release="", blocked=True)
_NOTHING = StreamStep(release="", blocked=False)
_RECENT = 8
_TRIM_CHARS = 4096
"""Dead characters at the head of the buffer before it is cut (so cutting is amortized)."""


class _Split(NamedTuple):
    """The cursors as idle or busy, kept while no cursor changes sides (most deltas)."""

    idle: list[DetectorCursor]
    floors: list[DetectorCursor]
    """The idle ones whose hold point may lag the end (a cut-off marker)."""
    busy: list[DetectorCursor]
    wake: frozenset[str]
    """Every idle cursor's wake characters."""
    markers: list[tuple[re.Pattern[str], int]]
    """Idle cursors' markers (``Quiet.marker``) and their lengths."""


class StreamFilter:
    def __init__(self, scanner: Scanner, actions: Mapping[str, Action], *, on_error: Action) -> None:
        self._scanner = scanner
        self._actions = actions
        self._on_error = on_error
        self.hold_len = scanner.max_match_len(actions, rewriting_only=True) - 1
        """The most normalized characters any rewriting detector holds back (L - 1)."""
        self._context_len = max(scanner.max_match_len(actions, rewriting_only=False), self.hold_len + 1)
        self._order = {name: i for i, name in enumerate(scanner.names)}
        """Detector order: same-priority matches of the same span settle as the whole text's do."""
        self._tally = FindingTally(Direction.RESPONSE)
        self._blocked = False
        self._finished = False
        self._start_over()

    def _start_over(self) -> None:
        self._cursors = [
            DetectorCursor(d, self._actions[d.name])
            for d in self._scanner.detectors
            if self._actions[d.name] is not Action.OFF
        ]
        self._flags = any(not c.rewrites for c in self._cursors)
        self._split: _Split | None = None
        self._recent: list[Candidate] = []
        """The last matches applied, for settling a flag-only match that became final late."""
        self._original = ""
        self._original_base = 0
        """Absolute original index of ``_original[0]``."""
        self._text = ""
        self._base = 0
        """Absolute normalized index of ``_text[0]``."""
        self._starts: list[int] | None = None
        """Absolute original index of each character of ``_text``; None while every character
        of the buffer is its own original (ASCII, most CJK), so the index is an offset."""
        self._released = 0
        self._released_original = 0
        self._pending: list[Candidate] = []
        """Final matches not yet released: they start at or after ``_released``."""

    def __repr__(self) -> str:
        held = self._base + len(self._text) - self._released
        return f"StreamFilter(held={held}, blocked={self._blocked})"

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self._tally.findings()

    @property
    def num_held(self) -> int:
        """Normalized characters received and not yet released."""
        return self._base + len(self._text) - self._released

    @property
    def num_scanned(self) -> int:
        """Characters handed to detectors so far, over all of them: the filter's work."""
        return sum(c.num_scanned for c in self._cursors)

    def holds(self) -> dict[str, int]:
        """Per active detector: normalized characters it holds back now (every cursor reads
        what it left unread first)."""
        if not self._blocked and not self._finished and (failed := self._catch_up()) is not None:
            self._fail(failed)
        n = self._base + len(self._text)
        return {c.detector.name: n - c.hold for c in self._cursors}

    def feed(self, delta: str) -> StreamStep:
        """Take the new text; a long delta is taken in pieces of ``SEGMENT_CHARS`` so that one
        step's cost stays bounded whatever the engine sends."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else _NOTHING
        if len(delta) <= SEGMENT_CHARS:
            return self._advance(delta)
        released: list[str] = []
        for begin in range(0, len(delta), SEGMENT_CHARS):
            step = self._advance(delta[begin : begin + SEGMENT_CHARS])
            if step.blocked:
                return step
            released.append(step.release)
        return StreamStep(release="".join(released), blocked=False)

    def finish(self) -> StreamStep:
        """Flush what is held back at the end of the stream."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else _NOTHING
        # An idle cursor that holds nothing back while idle has nothing to find in what it left
        # unread (no wake character came): reading it would only move its hold point to the end,
        # as ``skip_to`` does for one that wakes. Most cursors are such at the end of an answer.
        cursors = [c for c in self._cursors if c.quiet is None or c.quiet.keep]
        failed = self._catch_up(cursors)
        if failed is not None:
            return self._fail(failed)
        text, base = self._text, self._base
        for cursor in cursors:
            if not self._run(cursor, text, base, final=True):
                return self._fail(cursor.detector.name)
        self._finished = True
        return self._release(base + len(text))

    def _advance(self, piece: str) -> StreamStep:
        begin, new = self._append(piece)
        text, base = self._text, self._base
        n = base + len(text)
        split = self._split or self._split_cursors()
        chars = frozenset(new)
        if chars.isdisjoint(split.wake) and not any(
            marker.search(text, max(0, begin - base - width + 1)) for marker, width in split.markers
        ):
            busy, floors = split.busy, split.floors
        else:
            self._split = None
            busy, floors = list(split.busy), []
            for cursor in split.idle:
                quiet = cursor.quiet
                if quiet is None:
                    continue
                if chars.isdisjoint(quiet.wake) and (
                    quiet.marker is None
                    or quiet.marker.search(text, max(0, begin - base - quiet.marker_len + 1)) is None
                ):
                    if quiet.keep:
                        floors.append(cursor)
                    continue
                # Woken: the text it left unread first, as it would have read it, so that its
                # scan starts after that idle text rather than before it. When it held nothing
                # back while idle, that text changed nothing but the hold point.
                if quiet.keep == 0:
                    cursor.skip_to(begin)
                elif cursor.read_to < begin and not self._run(
                    cursor, text[: begin - base], base, final=False
                ):
                    return self._fail(cursor.detector.name)
                cursor.quiet = None
                busy.append(cursor)
        # A flag-only detector holds back as far as ``hold_len`` allows: a flag-only match found
        # in time is settled against the others (a flagged secret around a card number leaves
        # the number alone) and counted as the whole text would count it.
        cap = n - self.hold_len
        release = n
        for cursor in busy:
            if cursor.holds_forward and cursor.hold >= release:
                continue  # whatever it could still find starts there or later: it reads later
            if not self._run(cursor, text, base, final=False):
                return self._fail(cursor.detector.name)
            if cursor.quiet is not None:
                self._split = None
            release = min(release, cursor.hold if cursor.rewrites else max(cap, cursor.hold))
        for cursor in floors:
            quiet = cursor.quiet
            if quiet is None or (not cursor.rewrites and cap >= release):
                continue
            if max(cursor.hold, n - quiet.keep) >= release or cursor.floor(text, base, release) >= release:
                continue
            if not self._run(cursor, text, base, final=False):
                return self._fail(cursor.detector.name)
            if cursor.quiet is not quiet:
                self._split = None
            release = min(release, cursor.hold if cursor.rewrites else max(cap, cursor.hold))
        return self._release(release)

    def _split_cursors(self) -> _Split:
        idle = [c for c in self._cursors if c.quiet is not None]
        quiets = [q for c in idle if (q := c.quiet) is not None]
        self._split = _Split(
            idle=idle,
            floors=[c for c in idle if c.quiet is not None and c.quiet.keep],
            busy=[c for c in self._cursors if c.quiet is None],
            wake=frozenset().union(*(q.wake for q in quiets)),
            markers=[(q.marker, q.marker_len) for q in quiets if q.marker is not None],
        )
        return self._split

    def _run(self, cursor: DetectorCursor, text: str, base: int, *, final: bool) -> bool:
        """Let the cursor read what it has not; False when its detector raised."""
        try:
            spans = cursor.advance(text, base, final=final)
        except Exception:
            self._scanner.count_failure(cursor.detector.name)
            return False
        if spans:
            detector = cursor.detector
            self._pending.extend((s, e, detector.priority, detector.name, cursor.action) for s, e in spans)
        return True

    def _catch_up(self, cursors: list[DetectorCursor] | None = None) -> str | None:
        """Every cursor (of ``cursors``, when given) reads what it left unread; the name of a
        detector that raised, if one did."""
        text, base = self._text, self._base
        n = base + len(text)
        self._split = None
        for cursor in self._cursors if cursors is None else cursors:
            if cursor.read_to < n and not self._run(cursor, text, base, final=False):
                return cursor.detector.name
        return None

    def _release(self, release: int) -> StreamStep:
        release = self._release_point(max(release, self._released))
        matches = self._take_final(release)
        for match in matches:
            self._tally.add(match.detector, match.action)
            if match.action is Action.BLOCK:
                self._blocked = True
        if self._blocked:
            self._original = self._text = ""
            return _BLOCKED
        release_at = self._original_index(release)
        begin, offset = self._released_original, self._original_base
        if matches:
            text = self._rewrite(matches, release_at)
        elif release_at == begin:
            text = ""
        else:
            text = self._original[begin - offset : release_at - offset]
        self._released, self._released_original = release, release_at
        if len(self._text) >= _TRIM_CHARS and (failed := self._trim()) is not None:
            return self._fail(failed)
        return StreamStep(release=text, blocked=False) if text else _NOTHING

    def _append(self, piece: str) -> tuple[int, str]:
        """Add the piece and its normalized form; return where and what its normalized text is."""
        begin = self._base + len(self._text)
        if piece.isascii():
            new, starts = piece.lower(), None
        else:
            norm = normalize(piece)
            new, starts = norm.text, norm.starts
        offset = self._original_base + len(self._original)
        if starts is not None and self._starts is None:
            self._starts = list(range(self._original_base, offset))
        if self._starts is not None:
            if starts is None:
                self._starts.extend(range(offset, offset + len(piece)))
            else:
                self._starts.extend([offset + s for s in starts])
        self._original += piece
        self._text += new
        return begin, new

    def _original_index(self, index: int) -> int:
        i = index - self._base
        if i < len(self._text):
            return self._original_base + i if self._starts is None else self._starts[i]
        return self._original_base + len(self._original)

    def _release_point(self, release: int) -> int:
        """Move ``release`` left until no pending match straddles it and it starts an original
        character (one character can expand to several normalized ones: "ﬁ" -> "fi")."""
        starts, base, floor = self._starts, self._base, self._released
        if starts is None and not self._pending:
            return release
        while True:
            moved = release
            i = moved - base
            if starts is not None and i < len(starts):
                while i > floor - base and starts[i - 1] == starts[i]:
                    i -= 1
                moved = base + i
            for start, end, *_ in self._pending:
                if start < moved < end:
                    moved = max(floor, start)
            if moved == release:
                return release
            release = moved

    def _take_final(self, release: int) -> list[Match]:
        """Settle and remove the pending matches that lie before ``release``. A match found after
        its text left (only a flag-only detector's can be) is counted, not applied."""
        if not self._pending:
            return []
        for late in (c for c in self._pending if c[0] < self._released):
            start, end, priority, name, action = late
            if not any(s < end and start < e and p >= priority for s, e, p, _, _ in self._recent):
                self._tally.add(name, action)
        now = [c for c in self._pending if self._released <= c[0] < release]
        self._pending = [c for c in self._pending if c[0] >= release]
        if not now:
            return []
        now.sort(key=lambda c: self._order.get(c[3], -1))  # stable: each detector's own order stays
        settled = self._scanner.settle(now)
        kept = {(m.start, m.detector) for m in settled}
        self._recent = [*self._recent, *(c for c in now if (c[0], c[3]) in kept)][-_RECENT:]
        return settled

    def _rewrite(self, matches: list[Match], release_at: int) -> str:
        begin, offset = self._released_original, self._original_base
        spans = [
            (self._original_index(m.start), self._original_index(m.end - 1) + 1, m.detector, m.action)
            for m in matches
        ]
        return rewrite_original(self._original, spans, begin, release_at, offset)

    def _trim(self) -> str | None:
        """Cut the dead head of the buffer once every cursor has read all of it; the name of a
        detector that raised while catching up, if one did."""
        failed = self._catch_up()
        if failed is not None:
            return failed
        keep_from = min([self._released - self._context_len, *(c.keep_from for c in self._cursors)])
        cut = keep_from - self._base
        if cut < _TRIM_CHARS:
            return None
        original_cut = self._original_index(keep_from) - self._original_base
        self._text = self._text[cut:]
        self._base += cut
        self._original = self._original[original_cut:]
        self._original_base += original_cut
        if self._starts is not None:
            starts = self._starts[cut:]
            first = self._original_base
            is_identity = len(starts) == len(self._original) and starts == list(
                range(first, first + len(starts))
            )
            self._starts = None if is_identity else starts
        return None

    def _fail(self, detector: str) -> StreamStep:
        self._tally.add(f"detector_failed:{detector}", self._on_error)
        if self._on_error is Action.BLOCK:
            self._blocked = True
            self._original = self._text = ""
            return _BLOCKED
        held = self._original_base + len(self._original) > self._released_original
        self._start_over()
        return StreamStep(release=FAILED_PLACEHOLDER if held else "", blocked=False)
