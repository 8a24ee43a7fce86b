"""CN mobile numbers: 1[3-9]x xxxx xxxx, optionally after +86 or 0086, grouped any way a person
types it ("138 1234 5678", "138.1234.5678", "+86 138-1234-5678"; see ``digit_run``).

A ``+`` before other digits makes them an international number ("+1 381 …"), not a CN mobile.
"""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.digit_run import (
    LOOKAROUND,
    MAX_SEPARATOR_RUN,
    MIN_TYPED_GROUP,
    RUN_CONTEXT,
    DigitRun,
    Window,
    glued,
    run_rule,
    run_start,
    scan_windows,
    window_digits,
    window_span,
)
from filters.holdback import Holdback, RunHoldback

_MOBILE = re.compile(r"1[3-9][0-9]{9}")
_MAX_DIGITS = len("0086") + 11
_MAX_MATCH_LEN = 1 + _MAX_DIGITS + (_MAX_DIGITS - 1) * MAX_SEPARATOR_RUN + LOOKAROUND
_RULE = run_rule(_MAX_MATCH_LEN, extra="+", marker="[0-9+]")  # "+86 …" starts at the "+"


class CnMobileDetector:
    name = "cn_mobile"
    max_match_len = _MAX_MATCH_LEN
    priority = 40
    lookbehind = RUN_CONTEXT + 1

    def __repr__(self) -> str:
        return f"CnMobileDetector(name={self.name!r})"

    def scan(self, text: str) -> list[Span]:
        return self.scan_from(text, 0)

    def scan_from(self, text: str, start: int) -> list[Span]:
        """A ``+`` just before ``start`` belongs to the run: scanned from there, kept from ``start``."""
        spans = scan_windows(
            text,
            11,
            _MAX_DIGITS,
            lambda run, window: self._accept(text, run, window),
            in_uniform_runs=False,
            start=start,
        )
        return [span for span in spans if span[0] >= start]

    @staticmethod
    def scan_start(text: str, start: int) -> int:
        """Where ``scan_from(text, start)`` begins reading: its run, and what decides it before."""
        return run_start(text, start) - 1

    def holdback(self) -> Holdback:
        return RunHoldback(_RULE)

    @staticmethod
    def _accept(text: str, run: DigitRun, window: Window) -> Span | None:
        if glued(run, window):
            return None
        digits = window_digits(text, run, window)
        plus = window.first == 0 and run.before == "+"
        if len(digits) == _MAX_DIGITS and digits.startswith("0086"):
            digits = digits[4:]
        elif len(digits) == 13 and plus and digits.startswith("86"):
            digits = digits[2:]
        elif len(digits) != 11 or plus:
            return None
        # Groups of one or two digits are a dotted quad or a list, not how a mobile is written
        # ("139.123.245.67" is an IPv4 address); a country code of its own is the exception.
        groups = run.groups[window.first : window.last + 1]
        if groups[0][1] - groups[0][0] == window.num_digits - 11:
            groups = groups[1:]
        if not _MOBILE.fullmatch(digits) or any(e - s < MIN_TYPED_GROUP for s, e in groups):
            return None
        start, end = window_span(run, window)
        return (start - 1 if plus else start), end
