"""Runs the active detectors over one normalized text and settles overlaps.

Fails closed: a detector that raises makes the whole outcome ``failed`` (the caller then blocks
or redacts everything) and is counted in ``strongroom.filters`` ``filter.detector.failures``.
There is no time limit here: a wall-clock limit failed valid text whenever the machine was busy.
Callers bound the work instead, by the characters they hand over (``filters.windowed_scan``,
``filters.scan_budget``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from opentelemetry import metrics

from filters.action import Action
from filters.detector import Detector


class Match(NamedTuple):
    start: int
    end: int
    detector: str
    action: Action


class ScanOutcome(NamedTuple):
    matches: list[Match]
    """Non-overlapping, sorted by start, normalized offsets."""
    failed: str | None
    """Name of the detector that failed, if any."""


class Scanner:
    def __init__(
        self,
        detectors: Sequence[Detector],
        *,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        """``meter_provider`` None means the global one the gateway installs."""
        self.detectors = tuple(detectors)
        meter = metrics.get_meter("strongroom.filters", meter_provider=meter_provider)
        self._failures = meter.create_counter(
            "filter.detector.failures", description="Detectors that raised (fail closed)"
        )
        self.names = tuple(d.name for d in self.detectors)
        self._match_lens: dict[tuple[int, bool], tuple[Mapping[str, Action], int]] = {}
        """``max_match_len`` per read-only actions mapping (kept, so its id is not reused) and
        kind: the ruleset hands out one per role set and model, and every stream asks twice. A
        plain dict, which its owner may still change, is worked out each time."""

    def __repr__(self) -> str:
        return f"Scanner(detectors={self.names!r})"

    def max_match_len(self, actions: Mapping[str, Action], *, rewriting_only: bool) -> int:
        """Longest match among the detectors that are on (or that rewrite text)."""
        key = (id(actions), rewriting_only)
        known = self._match_lens.get(key)
        if known is not None and known[0] is actions:
            return known[1]
        lengths = [
            d.max_match_len
            for d in self.detectors
            if actions[d.name] is not Action.OFF and (actions[d.name].rewrites or not rewriting_only)
        ]
        longest = max(lengths, default=1)
        if not isinstance(actions, dict) and len(self._match_lens) < 4096:
            self._match_lens[key] = (actions, longest)
        return longest

    def scan(self, text: str, actions: Mapping[str, Action]) -> ScanOutcome:
        found: list[tuple[int, int, int, str, Action]] = []
        for detector in self.detectors:
            action = actions[detector.name]
            if action is Action.OFF:
                continue
            try:
                spans = detector.scan(text)
            except Exception:
                self.count_failure(detector.name)
                return ScanOutcome([], detector.name)
            found.extend((start, end, detector.priority, detector.name, action) for start, end in spans)
        return ScanOutcome(_settle(found), None)

    @staticmethod
    def settle(found: list[Candidate]) -> list[Match]:
        """Settle overlaps among spans found piece by piece (the stream filter's)."""
        return _settle(found)

    def count_failure(self, detector: str) -> None:
        """A detector raised (the stream filter runs detectors itself, and reports here)."""
        self._failures.add(1, {"detector": detector, "reason": "error"})


Candidate = tuple[int, int, int, str, Action]
"""(start, end, priority, detector, action) of one span before overlaps are settled."""


def _settle(found: list[Candidate]) -> list[Match]:
    """Keep the higher-priority, then longer, span wherever two overlap.

    Candidates are taken in that order and kept when none of their characters is taken yet: one
    byte per character marks what is taken, so the cost is the candidates' total length (each at
    most a detector's ``max_match_len``), linear in the text however many spans overlap."""
    if len(found) <= 1:
        return [Match(s, e, name, action) for s, e, _, name, action in found if e > s]
    found.sort(key=lambda f: (-f[2], f[0] - f[1], f[0]))
    taken = bytearray(max(end for _, end, _, _, _ in found))
    kept: list[Match] = []
    for start, end, _, name, action in found:
        if end <= start or taken.find(1, start, end) != -1:
            continue
        taken[start:end] = b"\x01" * (end - start)
        kept.append(Match(start, end, name, action))
    kept.sort()
    return kept
