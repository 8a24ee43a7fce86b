"""One detector's progress through one stream: what of it is final, found once, scanned once.

    stream     |........ final, reported .........|... scanned again next time ...|
               0                              scanned_to (= the last hold point)  n

Every step the detector's ``Holdback`` reads the new characters and names the new hold point h.
Spans that start in ``[scanned_to, h)`` are final: the detector scans from ``scanned_to`` (with
``lookbehind`` characters of context) to the end, reports those spans, and moves
``scanned_to`` to h. When the holdback says nothing there could match (no digit for a card, no
finished term for a keyword list), the scan is skipped. A detector that is not an
``IncrementalDetector`` is held back by its ``max_match_len`` and scanned with that much context.

An idle cursor (its holdback's ``quiet`` is set and no match can start at or after
``scanned_to``) need not read at all while the new text lacks its wake characters: the stream
leaves it unread, knowing its hold point is at least ``floor``, and has it read everything it
missed in one call (``read_to`` onwards) once that bound no longer settles the release, the
wake characters come, or the stream ends.

``num_scanned`` counts the characters handed to the detector, the measure of this module's work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from filters.action import Action
from filters.detector import Detector, IncrementalDetector, Span
from filters.holdback import CapHoldback, Holdback, Quiet

__all__ = ["DetectorCursor"]


class DetectorCursor:
    __slots__ = (
        "_holdback",
        "_lookbehind",
        "_scan_from",
        "_scan_start",
        "action",
        "detector",
        "hold",
        "holds_forward",
        "num_scanned",
        "quiet",
        "read_to",
        "rewrites",
        "scanned_to",
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
        self.rewrites = action.rewrites
        self.holds_forward: bool = getattr(self._holdback, "holds_forward", False)
        """Its hold point never moves back, however the text is split into reads: then a busy
        cursor whose last hold point lies at or after the release point may read later, and
        its hold points come out as if it had read every delta."""
        self.scanned_to = 0
        """Spans that start before this are final and were reported."""
        self.read_to = 0
        """The holdback has read the text before this."""
        self.hold = 0
        self.num_scanned = 0
        self.quiet: Quiet | None = self._idle(self._holdback, 0)
        """Set while idle (module docstring): the stream may leave the new text unread. A
        holdback that is idle before it has read anything starts so: the first delta of a
        stream need not run every detector."""

    def __repr__(self) -> str:
        return (
            f"DetectorCursor(detector={self.detector.name!r}, hold={self.hold}, scanned_to={self.scanned_to})"
        )

    def skip_to(self, n: int) -> None:
        """An idle cursor that holds nothing back while idle (``Quiet.keep`` 0) and was left
        unread up to ``n``: nothing there to hold or scan, and nothing its holdback needs."""
        self.hold = self.scanned_to = self.read_to = n

    def floor(self, text: str, base: int, bound: int) -> int:
        """For an idle cursor with unread text that woke nothing: a hold point its reading it
        would not go below, worked out only as far as needed to tell whether it reaches
        ``bound``."""
        quiet = self.quiet
        if quiet is None:
            return self.hold  # hold points only move forward
        n = base + len(text)
        if quiet.keep == 0:
            return n
        low = max(self.hold, n - quiet.keep)
        if low >= bound or quiet.outside is None:
            return low
        found = quiet.outside.search(text, max(0, bound - 1 - base))
        return low if found is None else max(low, base + found.start() + 1)

    @property
    def keep_from(self) -> int:
        """The first character this cursor may still read."""
        return self.scanned_to - self._lookbehind

    def advance(self, text: str, base: int, *, final: bool) -> list[Span]:
        """Read the characters not read yet, ``[read_to, n)``; return the spans that became
        final (absolute positions). ``final``: the stream ends here, so every span is. Raises
        what the detector raises."""
        n = base + len(text)
        holdback = self._holdback
        if final:
            hold = n
        else:
            hold = holdback.advance(text, base, self.read_to)
            self.read_to = n
        start = self.scanned_to
        if hold <= start:
            self.hold = start
            self.quiet = None if final else self._idle(holdback, start)
            return []
        self.hold = self.scanned_to = hold
        self.quiet = None if final else self._idle(holdback, hold)
        if not holdback.may_match(start):
            return []
        lo = base + self._scan_start(text, start - base) if self._scan_start else start - self._lookbehind
        lo = max(base, lo)
        self.num_scanned += n - lo
        spans = self._scan_from(text[lo - base :], start - lo)
        return [(s + lo, e + lo) for s, e in spans if s + lo < hold]

    @staticmethod
    def _idle(holdback: Holdback, scanned_to: int) -> Quiet | None:
        quiet = holdback.quiet
        return None if quiet is None or holdback.may_match(scanned_to) else quiet
