"""CN unified social credit codes (GB 32100-2015): 18 characters, mod-31 check character."""

from __future__ import annotations

import re

from filters.checksum import credit_code_valid
from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import RunRule

_C = "[0-9a-hj-np-rtuw-y]"


class CnCreditCodeDetector(PatternDetector):
    name = "cn_credit_code"
    max_match_len = 18 + 1  # and the character after it, which must not be a letter or digit
    priority = 55
    stream_rule = RunRule(
        "abcdefghijklmnopqrstuvwxyz0123456789",
        re.compile(rf"{_C}{{2}}[0-9]{{6}}"),
        18 + 1,
        marker_len=8,
        partial=re.compile(rf"(?:{_C}{{1,2}}|{_C}{{2}}[0-9]{{1,5}})\Z"),
        trigger=re.compile("[0-9]"),
        wake=frozenset("0123456789"),
    )
    pattern = re.compile(rf"[0-9]{{6}}(?<=(?<![0-9a-z]){_C}{{2}}[0-9]{{6}}){_C}{{10}}(?![0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        start = match.start() - 2  # the match begins at the region digits, after two code chars
        return (start, match.end()) if credit_code_valid(match.string[start : match.end()]) else None
