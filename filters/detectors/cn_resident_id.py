"""CN resident identity numbers (GB 11643): 17 digits and an ISO 7064 MOD 11-2 check character.

Only the checksum is verified: full validation (region table, birth date) rejects many real
numbers and raises on some, and a filter must rather over-detect than miss.
"""

from __future__ import annotations

import re

from filters.checksum import resident_id_valid
from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector


class CnResidentIdDetector(PatternDetector):
    name = "cn_resident_id"
    max_match_len = 18
    priority = 60
    pattern = re.compile(r"[1-9](?<![0-9a-z][1-9])[0-9]{16}[0-9x](?![0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        return match.span() if resident_id_valid(match.group()) else None
