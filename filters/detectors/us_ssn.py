"""US social security numbers written AAA-GG-SSSS (or with spaces), excluding never-issued ranges.

SSNs carry no checksum; requiring the separator keeps bare nine-digit numbers (order ids,
amounts) from being flagged.
"""

from __future__ import annotations

import re

from filters.detectors.pattern_detector import PatternDetector


class UsSsnDetector(PatternDetector):
    name = "us_ssn"
    max_match_len = 11
    priority = 30
    pattern = re.compile(
        r"(?<![0-9-])(?!000|666|9)[0-9]{3}([- ])(?!00)[0-9]{2}\1(?!0000)[0-9]{4}(?![0-9]|-[0-9])"
    )
