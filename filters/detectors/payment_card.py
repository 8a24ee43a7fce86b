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
# Shape: (?<![0-9a-z])[a-z]{2}[0-9]{2}(?: [0-9a-z]{4})* right before the card, then one space.
_HEAD = re.compile(r"[a-z]{2}[0-9]{2}")
_GROUP = re.compile(r"[0-9a-z]{4}")
_LOWER_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")


def follows_grouped_code(text: str, start: int) -> bool:
    """Does an IBAN-shaped code in 4-character groups end one space (or a space and a newline)
    before ``start``? Walks back group by group, so the cost does not grow with the text."""
    if text[start - 1 : start] == " ":
        space = start - 1
    elif text[max(start - 2, 0) : start] == " \n":
        space = start - 2
    else:
        return False
    while space >= 4:
        head = space - 4
        if _HEAD.fullmatch(text, head, space) and (head == 0 or text[head - 1] not in _LOWER_ALNUM):
            return True
        if not (_GROUP.fullmatch(text, head, space) and text[head - 1 : head] == " "):
            return False
        space = head - 1
    return False


class PaymentCardDetector(PatternDetector):
    name = "payment_card"
    max_match_len = 19 + 18
    priority = 50
    pattern = re.compile(r"[1-9](?<![0-9a-z+_][1-9])(?:[ -]?[0-9]){12,18}(?![0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        value = match.group()
        if follows_grouped_code(match.string, match.start()):
            return None
        if " " in value and "-" in value:  # cards are grouped one way; "+86 138-…" is a phone
            return None
        return match.span() if luhn_valid(compact(value)) else None
