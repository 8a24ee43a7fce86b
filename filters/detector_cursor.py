"""One detector's progress through one stream: what of it is final, found once, scanned once.

    stream     |........ final, reported .........|... scanned again next time ...|
               0                              scanned_to (= the last hold point)  n

Every step the detector's ``Holdback`` reads the new characters and names the new hold point h.
Spans that start in ``[scanned_to, h)`` are final: the detector scans from ``scanned_to`` (with
``lookbehind`` characters of context) to the end, reports those spans, and moves
``scanned_to`` to h. When the holdback says nothing there could match (no digit for a card, no
finished term for a keyword list), the scan is skipped. A detector that is not an
``IncrementalDetector`` is held back by its ``max_match_len`` and scanned with that much context.

``num_scanned`` counts the characters handed to the detector, the measure of this module's work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from filters.action import Action
from filters.detector import Detector, IncrementalDetector, Span
from filters.holdback import CapHoldback, Holdback

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
        self.wake = self._holdback.wake
        """While the hold point is the end of the stream, text without any of these characters
        changes nothing for this cursor (``skip``); None when any text may."""

    def __repr__(self) -> str:
        return (
            f"DetectorCursor(detector={self.detector.name!r}, hold={self.hold}, scanned_to={self.scanned_to})"
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
        self.wake = self._holdback.wake
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
