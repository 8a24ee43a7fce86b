"""Telephone numbers outside CN mobiles: North American (NANP) and +country international forms.

Without a checksum, a phone is recognised by its shape: NANP area and exchange codes start with
2-9, a bare leading 1 needs a separator after it (else any 11-digit id starting with 1 would
be a phone); international numbers need the leading + and 7 to
15 digits (E.164).
"""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import RunRule

_NANP = (
    r"(?:(?:\+1|001|1(?=[ .-]))[ .-]?)?(?:\([2-9][0-9]{2}\)|[2-9][0-9]{2})[ .-]?[2-9][0-9]{2}[ .-]?[0-9]{4}"
)
# Possessive digit groups: a long digit string is cut into groups one way only, not tried every way.
_INTL = r"\+[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,5}+\)?){1,5}+"
_EXT = r"(?:[ ]?(?:x|ext\.?)[ ]?[0-9]{1,5})?"


class PhoneDetector(PatternDetector):
    name = "phone"
    max_match_len = 56
    priority = 20
    # Digits, the separators, brackets and "+" of the forms above, and the letters of "ext".
    stream_rule = RunRule(
        "0123456789 .-()+xet",
        re.compile(r"[0-9+(]"),
        56,
        trigger=re.compile("[0-9]"),
        wake=frozenset("0123456789+("),
    )
    pattern = re.compile(rf"(?<![0-9a-z+.-])(?:{_NANP}|{_INTL}){_EXT}(?![0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        value = match.group()
        num_digits = sum(ch.isdigit() for ch in value)
        if not 7 <= num_digits <= 20:
            return None
        return match.span()
