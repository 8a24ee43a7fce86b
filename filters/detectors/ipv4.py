"""IPv4 addresses in dotted-quad form, each octet 0-255, not part of a longer dotted number."""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import RunRule


class Ipv4Detector(PatternDetector):
    name = "ipv4"
    max_match_len = 15 + 2  # and ".5" after it, which makes it part of a longer dotted number
    priority = 25
    stream_rule = RunRule(
        "0123456789.",
        re.compile("[0-9]"),
        15 + 2,
        trigger=re.compile("[0-9]"),
        wake=frozenset("0123456789"),
    )
    # Shape first (fast), octet ranges in accept().
    pattern = re.compile(r"[0-9](?<![0-9.][0-9])[0-9]{0,2}(?:\.[0-9]{1,3}){3}(?![0-9]|\.[0-9])")

    def accept(self, match: re.Match[str]) -> Span | None:
        for octet in match.group().split("."):
            if int(octet) > 255 or (len(octet) > 1 and octet[0] == "0"):
                return None
        return match.span()
