"""The incremental stream filter as every cursor reading every delta, kept as the peer of
``bench.filters.stream`` and the oracle of ``tests/unit/filters/test_stream_filter_lazy.py``.

This is ``filters/stream_filter.py`` and ``filters/detector_cursor.py`` as they were before idle
cursors were left unread (issue 19): each delta, every active detector's holdback read the new
text unless it held nothing and the text had none of its wake characters. Not used by the
gateway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

from common.finding import Finding
from filters.action import Action, Direction
from filters.context import StreamStep
from filters.detector import Detector, IncrementalDetector, Span
from filters.finding_tally import FindingTally
from filters.holdback import CapHoldback, Holdback, RunHoldback
from filters.normalized import normalize
from filters.rewrite import FAILED_PLACEHOLDER, rewrite_original
from filters.scanner import Candidate, Match, Scanner
from filters.windowed_scan import SEGMENT_CHARS

__all__ = ["EagerStreamFilter"]


def _wake(holdback: Holdback) -> frozenset[str] | None:
    """What holdbacks called ``wake`` then: only a run rule's, while idle and when it holds
    nothing back while idle."""
    quiet = holdback.quiet
    is_run = isinstance(holdback, RunHoldback)
    return quiet.wake if is_run and quiet is not None and quiet.keep == 0 else None


class _EagerCursor:
    __slots__ = (
        "_holdback",
        "_lookbehind",
        "_scan_from",
        "_scan_start",
        "action",
        "detector",
        "hold",
        "num_scanned",
        "scanned_to",
        "wake",
    )

    def __init__(self, detector: Detector, action: Action) -> None:
        self.detector = detector
        self.action = action
        self._scan_from: Callable[[str, int], list[Span]]
        # Not isinstance(detector, IncrementalDetector): a runtime protocol check costs more than
        # the rest of a stream's set-up.
        if hasattr(detector, "holdback") and hasattr(detector, "scan_from"):
            incremental = cast("IncrementalDetector", detector)
            self._holdback: Holdback = incremental.holdback()
            self._lookbehind = incremental.lookbehind
            self._scan_from = incremental.scan_from
            # A detector may know better where a scan from ``start`` begins reading (a digit run's
            # first digit) than its worst-case ``lookbehind``.
            self._scan_start: Callable[[str, int], int] | None = getattr(detector, "scan_start", None)
        else:
            self._holdback = CapHoldback(detector.max_match_len)
            self._lookbehind = detector.max_match_len

            def scan_from(text: str, start: int) -> list[Span]:
                return [span for span in detector.scan(text) if span[0] >= start]

            self._scan_from = scan_from
            self._scan_start = None
        self.scanned_to = 0
        """Spans that start before this are final and were reported."""
        self.hold = 0
        self.num_scanned = 0
        self.wake = _wake(self._holdback)
        """While the hold point is the end of the stream, text without any of these characters
        changes nothing for this cursor (``skip``); None when any text may."""

    def __repr__(self) -> str:
        return (
            f"_EagerCursor(detector={self.detector.name!r}, hold={self.hold}, scanned_to={self.scanned_to})"
        )

    def skip(self, n: int) -> None:
        """The new text up to ``n`` held none of ``wake`` while nothing was held: nothing to
        hold, nothing to scan."""
        self.hold = self.scanned_to = n

    @property
    def keep_from(self) -> int:
        """The first character this cursor may still read."""
        return self.scanned_to - self._lookbehind

    def advance(self, text: str, base: int, begin: int, *, final: bool) -> list[Span]:
        """Read the new characters ``[begin, n)``; return the spans that became final (absolute
        positions). ``final``: the stream ends here, so every span is. Raises what the detector
        raises."""
        n = base + len(text)
        hold = n if final else self._holdback.advance(text, base, begin)
        self.wake = _wake(self._holdback)
        self.hold = hold = max(hold, self.scanned_to)
        if hold == self.scanned_to:
            return []
        start = self.scanned_to
        self.scanned_to = hold
        if not self._holdback.may_match(start):
            return []
        lo = base + self._scan_start(text, start - base) if self._scan_start else start - self._lookbehind
        lo = max(base, lo)
        self.num_scanned += n - lo
        spans = self._scan_from(text[lo - base :], start - lo)
        return [(s + lo, e + lo) for s, e in spans if s + lo < hold]


_BLOCKED = StreamStep(release="", blocked=True)
_RECENT = 8
_TRIM_CHARS = 4096
"""Dead characters at the head of the buffer before it is cut (so cutting is amortized)."""


class EagerStreamFilter:
    def __init__(self, scanner: Scanner, actions: Mapping[str, Action], *, on_error: Action) -> None:
        self._scanner = scanner
        self._actions = actions
        self._on_error = on_error
        self.hold_len = scanner.max_match_len(actions, rewriting_only=True) - 1
        """The most normalized characters any rewriting detector holds back (L - 1)."""
        self._context_len = max(scanner.max_match_len(actions, rewriting_only=False), self.hold_len + 1)
        self._tally = FindingTally(Direction.RESPONSE)
        self._blocked = False
        self._finished = False
        self._start_over()

    def _start_over(self) -> None:
        self._cursors = [
            _EagerCursor(d, self._actions[d.name])
            for d in self._scanner.detectors
            if self._actions[d.name] is not Action.OFF
        ]
        self._rewriting = [c for c in self._cursors if c.action.rewrites]
        self._flagging = [c for c in self._cursors if not c.action.rewrites]
        self._recent: list[Candidate] = []
        """The last matches applied, for settling a flag-only match that became final late."""
        self._original = ""
        self._original_base = 0
        """Absolute original index of ``_original[0]``."""
        self._text = ""
        self._base = 0
        """Absolute normalized index of ``_text[0]``."""
        self._starts: list[int] = []
        """Absolute original index of each character of ``_text``."""
        self._released = 0
        self._released_original = 0
        self._pending: list[Candidate] = []
        """Final matches not yet released: they start at or after ``_released``."""

    def __repr__(self) -> str:
        held = self._base + len(self._text) - self._released
        return f"EagerStreamFilter(held={held}, blocked={self._blocked})"

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
        """Per active detector: normalized characters it holds back now."""
        n = self._base + len(self._text)
        return {c.detector.name: n - c.hold for c in self._cursors}

    def feed(self, delta: str) -> StreamStep:
        """Take the new text; a long delta is taken in pieces of ``SEGMENT_CHARS`` so that one
        step's cost stays bounded whatever the engine sends."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else StreamStep(release="", blocked=False)
        released: list[str] = []
        for begin in range(0, len(delta), SEGMENT_CHARS):
            step = self._advance(delta[begin : begin + SEGMENT_CHARS], final=False)
            if step.blocked:
                return step
            released.append(step.release)
        return StreamStep(release="".join(released), blocked=False)

    def finish(self) -> StreamStep:
        """Flush what is held back at the end of the stream."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else StreamStep(release="", blocked=False)
        step = self._advance("", final=True)
        self._finished = True
        return step

    def _advance(self, piece: str, *, final: bool) -> StreamStep:
        begin = self._append(piece)
        n = self._base + len(self._text)
        chars = frozenset(self._text[begin - self._base :])
        for cursor in self._cursors:
            wake = None if final else cursor.wake
            if wake is not None and cursor.hold == begin and chars.isdisjoint(wake):
                cursor.skip(n)
                continue
            try:
                spans = cursor.advance(self._text, self._base, begin, final=final)
            except Exception:
                self._scanner.count_failure(cursor.detector.name)
                return self._fail(cursor.detector.name)
            if spans:
                detector = cursor.detector
                self._pending.extend(
                    (s, e, detector.priority, detector.name, cursor.action) for s, e in spans
                )
        release = n if final else self._hold_point(n)
        release = self._release_point(max(release, self._released))
        matches = self._take_final(release)
        for match in matches:
            self._tally.add(match.detector, match.action)
        if any(m.action is Action.BLOCK for m in matches):
            self._blocked = True
            self._original = self._text = ""
            return _BLOCKED
        release_at = self._original_index(release)
        text = self._rewrite(matches, release_at)
        self._released, self._released_original = release, release_at
        self._trim()
        return StreamStep(release=text, blocked=False)

    def _hold_point(self, n: int) -> int:
        """The earliest hold point of the rewriting detectors, and of the flag-only ones as far
        as ``hold_len`` allows: a flag-only match found in time is settled against the others
        (a flagged secret around a card number leaves the number alone) and counted as the
        whole text would count it, without letting a long flag-only detector hold text back."""
        hold = min((c.hold for c in self._rewriting), default=n)
        if self._flagging:
            hold = min(hold, max(n - self.hold_len, min(c.hold for c in self._flagging)))
        return hold

    def _append(self, piece: str) -> int:
        """Add the piece and its normalized form; return where its normalized text begins."""
        begin = self._base + len(self._text)
        offset = self._original_base + len(self._original)
        norm = normalize(piece)
        self._original += piece
        self._text += norm.text
        if norm.starts is None:
            self._starts.extend(range(offset, offset + len(piece)))
        else:
            self._starts.extend([offset + s for s in norm.starts])
        return begin

    def _original_index(self, index: int) -> int:
        if index - self._base < len(self._starts):
            return self._starts[index - self._base]
        return self._original_base + len(self._original)

    def _release_point(self, release: int) -> int:
        """Move ``release`` left until no pending match straddles it and it starts an original
        character (one character can expand to several normalized ones: "ﬁ" -> "fi")."""
        starts, base, floor = self._starts, self._base, self._released
        while True:
            moved = release
            i = moved - base
            if i < len(starts):
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
        settled = self._scanner.settle(now)
        kept = {(m.start, m.detector) for m in settled}
        self._recent = [*self._recent, *(c for c in now if (c[0], c[3]) in kept)][-_RECENT:]
        return settled

    def _rewrite(self, matches: list[Match], release_at: int) -> str:
        begin, offset = self._released_original, self._original_base
        if not matches:
            return self._original[begin - offset : release_at - offset]
        spans = [
            (self._original_index(m.start), self._original_index(m.end - 1) + 1, m.detector, m.action)
            for m in matches
        ]
        return rewrite_original(self._original, spans, begin, release_at, offset)

    def _trim(self) -> None:
        if len(self._text) < _TRIM_CHARS:
            return
        keep_from = min([self._released - self._context_len, *(c.keep_from for c in self._cursors)])
        cut = keep_from - self._base
        if cut < _TRIM_CHARS:
            return
        original_cut = self._original_index(keep_from) - self._original_base
        self._text = self._text[cut:]
        self._starts = self._starts[cut:]
        self._base += cut
        self._original = self._original[original_cut:]
        self._original_base += original_cut

    def _fail(self, detector: str) -> StreamStep:
        self._tally.add(f"detector_failed:{detector}", self._on_error)
        if self._on_error is Action.BLOCK:
            self._blocked = True
            self._original = self._text = ""
            return _BLOCKED
        held = self._original_base + len(self._original) > self._released_original
        self._start_over()
        return StreamStep(release=FAILED_PLACEHOLDER if held else "", blocked=False)
