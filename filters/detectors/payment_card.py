"""Payment card numbers: 13 to 19 digits, optional single spaces or dashes, Luhn-valid.

Letters or a ``+`` glued to either end make it part of something else (an IBAN, a phone).
Covers UnionPay (62…) at 16 to 19 digits, which Presidio's pattern misses at 18 and 19.
"""

from __future__ import annotations

import re

from filters.checksum import luhn_valid
from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector, compact

# "GB74 HYRE 9238 …": digits continuing the groups of an IBAN-shaped code are not a card.
_GROUPED_CODE_BEFORE = re.compile(r"(?<![0-9a-z])[a-z]{2}[0-9]{2}(?: [0-9a-z]{4})* $")


class PaymentCardDetector(PatternDetector):
    name = "payment_card"
    max_match_len = 19 + 18
    priority = 50
    pattern = re.compile(r"[1-9](?<![0-9a-z+_][1-9])(?:[ -]?[0-9]){12,18}(?![0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        value = match.group()
        if _GROUPED_CODE_BEFORE.search(match.string, 0, match.start()):
            return None
        if " " in value and "-" in value:  # cards are grouped one way; "+86 138-…" is a phone
            return None
        return match.span() if luhn_valid(compact(value)) else None
