"""Payment card numbers: 13 to 19 digits in any grouping a person types, that a card scheme would
issue (leading digits and length, ``card_scheme``) and that pass Luhn.

Candidates are windows of a digit run (``digit_run``): "4111.1111.1111.1111", "4111 – 1111 …",
"6222 0212 3456 7890 128" after a date on the same line. Letters glued to either end make the
digits part of a code (an IBAN's groups, ``ref gb94bdmu4195…``), and a leading ``+`` makes them a
phone number; an IBAN-shaped code whose groups run up to the window makes it that code's tail.
"""

from __future__ import annotations

import re

from filters.checksum import luhn_valid
from filters.detector import Span
from filters.detectors.card_scheme import MAX_LEN, MIN_LEN, is_issuable
from filters.detectors.digit_run import (
    LOOKAROUND,
    MAX_SEPARATOR_RUN,
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

# "GB74 HYRE 9238 …": digits continuing the groups of an IBAN-shaped code are not a card.
# Shape: (?<![0-9a-z])[a-z]{2}[0-9]{2}(?: [0-9a-z]{4})* right before the card, then one space.
_HEAD = re.compile(r"[a-z]{2}[0-9]{2}")
_GROUP = re.compile(r"[0-9a-z]{4}")
_LOWER_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")
_MAX_IBAN_GROUPS = 34 // 4 + 1
"""An IBAN has at most 34 characters, so its head is at most this many groups back."""


def follows_grouped_code(text: str, start: int) -> bool:
    """Does an IBAN-shaped code in 4-character groups end one space (or a space and a newline)
    before ``start``? Walks back at most one IBAN's worth of groups, so the cost is constant."""
    if text[start - 1 : start] == " ":
        space = start - 1
    elif text[max(start - 2, 0) : start] == " \n":
        space = start - 2
    else:
        return False
    for _ in range(_MAX_IBAN_GROUPS):
        if space < 4:
            return False
        head = space - 4
        if _HEAD.fullmatch(text, head, space) and (head == 0 or text[head - 1] not in _LOWER_ALNUM):
            return True
        if not (_GROUP.fullmatch(text, head, space) and text[head - 1 : head] == " "):
            return False
        space = head - 1
    return False


_MAX_MATCH_LEN = MAX_LEN + (MAX_LEN - 1) * MAX_SEPARATOR_RUN + LOOKAROUND
_RULE = run_rule(_MAX_MATCH_LEN)


class PaymentCardDetector:
    name = "payment_card"
    max_match_len = _MAX_MATCH_LEN
    priority = 50
    lookbehind = RUN_CONTEXT + 2 + _MAX_IBAN_GROUPS * 5
    """The run's beginning, and one IBAN's worth of groups before it (``follows_grouped_code``)."""

    def __repr__(self) -> str:
        return f"PaymentCardDetector(name={self.name!r})"

    def scan(self, text: str) -> list[Span]:
        return self.scan_from(text, 0)

    def scan_from(self, text: str, start: int) -> list[Span]:
        return scan_windows(
            text,
            MIN_LEN,
            MAX_LEN,
            lambda run, window: self._accept(text, run, window),
            in_uniform_runs=False,
            start=start,
        )

    @staticmethod
    def scan_start(text: str, start: int) -> int:
        """Where ``scan_from(text, start)`` begins reading: its run, and what decides it before."""
        return run_start(text, start) - (2 + _MAX_IBAN_GROUPS * 5)

    def holdback(self) -> Holdback:
        return RunHoldback(_RULE)

    @staticmethod
    def _accept(text: str, run: DigitRun, window: Window) -> Span | None:
        if glued(run, window) or (window.first == 0 and run.before == "+"):
            return None
        digits = window_digits(text, run, window)
        if not (is_issuable(digits) and luhn_valid(digits)):
            return None
        start, end = window_span(run, window)
        return None if follows_grouped_code(text, start) else (start, end)
