"""US social security numbers written AAA-GG-SSSS with one separator repeated (dash, space, dot,
slash ...), excluding never-issued ranges.

SSNs carry no checksum; requiring the separator keeps bare nine-digit numbers (order ids,
amounts) from being flagged, and the 3-2-4 groups must stand on their own in their digit run
(``digit_run``): "123-45-6789-0000" is some other number.
"""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.digit_run import (
    LOOKAROUND,
    MAX_SEPARATOR_RUN,
    RUN_CONTEXT,
    DigitRun,
    digit_runs,
    run_rule,
    run_start,
)
from filters.holdback import Holdback, RunHoldback

_SSN = re.compile(r"(?!000|666|9)[0-9]{3}(?!00)[0-9]{2}(?!0000)[0-9]{4}")
_SHAPE = (3, 2, 4)
_MAX_MATCH_LEN = 9 + 2 * MAX_SEPARATOR_RUN + LOOKAROUND
_RULE = run_rule(_MAX_MATCH_LEN)


class UsSsnDetector:
    name = "us_ssn"
    max_match_len = _MAX_MATCH_LEN
    priority = 30
    lookbehind = RUN_CONTEXT + 1

    def __repr__(self) -> str:
        return f"UsSsnDetector(name={self.name!r})"

    def scan(self, text: str) -> list[Span]:
        return self.scan_from(text, 0)

    @staticmethod
    def scan_start(text: str, start: int) -> int:
        """Where ``scan_from(text, start)`` begins reading: its run, and what decides it before."""
        return run_start(text, start) - 1

    def holdback(self) -> Holdback:
        return RunHoldback(_RULE)

    def scan_from(self, text: str, start: int) -> list[Span]:
        spans: list[Span] = []
        for run in digit_runs(text, run_start(text, start)):
            groups = run.groups
            for i in range(len(groups) - 2):
                if tuple(e - s for s, e in groups[i : i + 3]) != _SHAPE:
                    continue
                if self._stands_alone(text, run, i):
                    value = "".join(text[s:e] for s, e in groups[i : i + 3])
                    if _SSN.fullmatch(value) and groups[i][0] >= start:
                        spans.append((groups[i][0], groups[i + 2][1]))
        return spans

    @staticmethod
    def _stands_alone(text: str, run: DigitRun, i: int) -> bool:
        """The same separator inside, a different one (or the run's end) outside, no glued letters."""
        groups = run.groups
        separator = text[groups[i][1] : groups[i + 1][0]]
        if text[groups[i + 1][1] : groups[i + 2][0]] != separator:
            return False
        if i == 0:
            if run.glued_before:
                return False
        elif text[groups[i - 1][1] : groups[i][0]] == separator:
            return False
        if i + 3 == len(groups):
            return not run.glued_after
        return text[groups[i + 2][1] : groups[i + 3][0]] != separator
