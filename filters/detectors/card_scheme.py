"""Payment card schemes: the leading-digit ranges (IIN) and lengths each scheme issues.

A Luhn-valid number that no scheme below would issue (a 9558… bank-internal number, a 16-digit
order id starting 1…) is not a payment card. Ranges are those the schemes publish (ISO/IEC 7812
IINs as listed by each network's acceptance guide, 2024):

    scheme       leading digits                                    lengths
    visa         4                                                 13, 16, 19
    mastercard   51-55, 2221-2720                                  16
    amex         34, 37                                            15
    unionpay     62 (16-19), 81 00-81 71 (16)                      16-19
    discover     6011, 644-649, 65, 622126-622925                  16-19
    jcb          3528-3589 (16-19); 3088-3094, 3096-3102, 3112-3120,
                 3158-3159, 3337-3349 (16); 1800, 2131 (15)
    diners       300-305, 3095, 36, 38-39                          14-19
    mir          2200-2204                                         16-19
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CardScheme:
    name: str
    ranges: tuple[tuple[int, int], ...]
    """Inclusive ranges of the leading digits; both ends of a range have the same width."""
    lengths: tuple[int, ...]

    def issues(self, digits: str) -> bool:
        if len(digits) not in self.lengths:
            return False
        for low, high in self.ranges:
            width = len(str(low))
            if low <= int(digits[:width]) <= high:
                return True
        return False


SCHEMES = (
    CardScheme("visa", ((4, 4),), (13, 16, 19)),
    CardScheme("mastercard", ((51, 55), (2221, 2720)), (16,)),
    CardScheme("amex", ((34, 34), (37, 37)), (15,)),
    CardScheme("unionpay", ((62, 62),), (16, 17, 18, 19)),
    CardScheme("unionpay", ((8100, 8171),), (16,)),
    CardScheme("discover", ((6011, 6011), (644, 649), (65, 65), (622126, 622925)), (16, 17, 18, 19)),
    CardScheme("jcb", ((3528, 3589),), (16, 17, 18, 19)),
    CardScheme("jcb", ((3088, 3094), (3096, 3102), (3112, 3120), (3158, 3159), (3337, 3349)), (16,)),
    CardScheme("jcb", ((1800, 1800), (2131, 2131)), (15,)),
    CardScheme("diners", ((300, 305), (3095, 3095), (36, 36), (38, 39)), (14, 15, 16, 17, 18, 19)),
    CardScheme("mir", ((2200, 2204),), (16, 17, 18, 19)),
)
MIN_LEN = min(n for s in SCHEMES for n in s.lengths)
MAX_LEN = max(n for s in SCHEMES for n in s.lengths)


def _lengths_by_prefix() -> bytes:
    """Per first four digits, a bit mask of the lengths some scheme issues (bit n - 13 for n
    digits): every range above is decided by four digits except Discover's 622126-622925, which
    lies inside UnionPay's 62 with the same lengths. Bytes, not 10,000 sets: nothing for the GC."""
    table = bytearray(10_000)
    for prefix in range(10_000):
        head = f"{prefix:04d}"
        for n in range(MIN_LEN, MAX_LEN + 1):
            if any(n in s.lengths and s.issues(head.ljust(n, "0")) for s in SCHEMES):
                table[prefix] |= 1 << (n - MIN_LEN)
    return bytes(table)


_LENGTHS = _lengths_by_prefix()


def is_issuable(digits: str) -> bool:
    """Would some scheme issue a number with these leading digits and this length?"""
    n = len(digits)
    return MIN_LEN <= n <= MAX_LEN and bool(_LENGTHS[int(digits[:4])] >> (n - MIN_LEN) & 1)


def card_scheme(digits: str) -> str | None:
    """The scheme that would issue this number (ASCII digits), ignoring the check digit."""
    return next((s.name for s in SCHEMES if s.issues(digits)), None)
