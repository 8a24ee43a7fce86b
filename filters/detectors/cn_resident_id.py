"""CN resident identity numbers (GB 11643): 17 digits and a check character, validated like the
issuer does: a province code, a real birth date and the ISO 7064 MOD 11-2 check character.

    110105 19491231 002 X
    ^^ province (GB/T 2260 first level; 71 Taiwan, 81 Hong Kong, 82 Macao, 83 residence permits,
       91 foreigners' permanent residence)
           ^^^^^^^^ birth date YYYYMMDD, 1800 to today
                             ^ check character over the first 17 digits

Only the province level of the region code is checked: county codes are renumbered over the
years and old numbers stay valid. Grouped any way a person types it ("110105 19491231 002X",
"110105-19491231-002x", separated by dots or newlines): see ``digit_run``.
"""

from __future__ import annotations

import datetime

from filters.checksum import resident_id_valid
from filters.detector import Span
from filters.detectors.digit_run import (
    ASCII_ALNUM,
    LOOKAROUND,
    MAX_SEPARATOR_RUN,
    RUN_CONTEXT,
    DigitRun,
    Window,
    run_rule,
    run_start,
    scan_windows,
    window_digits,
    window_span,
)
from filters.holdback import Holdback, RunHoldback

PROVINCES = frozenset(
    (11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
     50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83, 91)
)  # fmt: skip
_LENGTH = 18
_MAX_MATCH_LEN = _LENGTH + (_LENGTH - 1) * MAX_SEPARATOR_RUN + LOOKAROUND
_RULE = run_rule(_MAX_MATCH_LEN, extra="x")  # the check character, and the one after it decides


def is_issuable(value: str, today: datetime.date | None = None) -> bool:
    """Province, birth date and check character of an 18-character ID (lower-case ``x``)."""
    if not resident_id_valid(value) or int(value[:2]) not in PROVINCES:
        return False
    try:
        born = datetime.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return datetime.date(1800, 1, 1) <= born <= (today or datetime.date.today())


class CnResidentIdDetector:
    name = "cn_resident_id"
    max_match_len = _MAX_MATCH_LEN
    priority = 60
    lookbehind = RUN_CONTEXT + 1

    def __repr__(self) -> str:
        return f"CnResidentIdDetector(name={self.name!r})"

    def scan(self, text: str) -> list[Span]:
        return self.scan_from(text, 0)

    def scan_from(self, text: str, start: int) -> list[Span]:
        return scan_windows(
            text,
            _LENGTH - 1,
            _LENGTH,
            lambda run, window: self._accept(text, run, window),
            in_uniform_runs=True,
            start=start,
        )

    @staticmethod
    def scan_start(text: str, start: int) -> int:
        """Where ``scan_from(text, start)`` begins reading: its run, and what decides it before."""
        return run_start(text, start) - 1

    def holdback(self) -> Holdback:
        return RunHoldback(_RULE)

    @staticmethod
    def _accept(text: str, run: DigitRun, window: Window) -> Span | None:
        start, end = window_span(run, window)
        at_run_end = window.last == len(run.groups) - 1
        if window.num_digits == _LENGTH - 1:
            # The check character X ends the run: "…002x", then anything but a letter or digit.
            if not (at_run_end and run.after == "x" and text[end + 1 : end + 2] not in ASCII_ALNUM):
                return None
            end += 1
        elif at_run_end and run.glued_after:
            return None
        if window.first == 0 and run.glued_before:
            return None
        value = window_digits(text, run, window) + ("x" if window.num_digits == _LENGTH - 1 else "")
        return (start, end) if is_issuable(value) else None
