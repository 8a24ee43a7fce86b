"""IBANs (ISO 13616): country, two check digits, a country-fixed length, mod 97, spaces allowed.

The country's registered length decides where the IBAN ends, so a following word or number
glued on by a space is not swallowed.
"""

from __future__ import annotations

import re

from filters.checksum import iban_valid
from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import RunRule

# SWIFT IBAN registry, release 2024: country -> total length.
IBAN_LENGTHS: dict[str, int] = {
    "ad": 24, "ae": 23, "al": 28, "at": 20, "az": 28, "ba": 20, "be": 16, "bg": 22, "bh": 22,
    "br": 29, "by": 28, "ch": 21, "cr": 22, "cy": 28, "cz": 24, "de": 22, "dk": 18, "do": 28,
    "ee": 20, "eg": 29, "es": 24, "fi": 18, "fo": 18, "fr": 27, "gb": 22, "ge": 22, "gi": 23,
    "gl": 18, "gr": 27, "gt": 28, "hr": 21, "hu": 28, "ie": 22, "il": 23, "iq": 23, "is": 26,
    "it": 27, "jo": 30, "kw": 30, "kz": 20, "lb": 28, "lc": 32, "li": 21, "lt": 20, "lu": 20,
    "lv": 21, "ly": 25, "mc": 27, "md": 24, "me": 22, "mk": 19, "mr": 27, "mt": 31, "mu": 30,
    "nl": 18, "no": 15, "pk": 24, "pl": 28, "ps": 29, "pt": 25, "qa": 29, "ro": 24, "rs": 22,
    "sa": 24, "sc": 31, "sd": 18, "se": 24, "si": 19, "sk": 24, "sm": 27, "st": 25, "sv": 28,
    "tl": 23, "tn": 24, "tr": 26, "ua": 29, "va": 22, "vg": 24, "xk": 20,
}  # fmt: skip
_MAX_LEN = max(IBAN_LENGTHS.values())
# Characters of an IBAN: ASCII letters and digits, single spaces only between them.
_GROUPS = re.compile(r"[0-9A-Za-z]+(?: [0-9A-Za-z]+)*")


class IbanDetector(PatternDetector):
    name = "iban"
    # The registered length with a single space between any two characters after the check
    # digits (``_GROUPS``), and the character after it that says whether a group runs on.
    max_match_len = 4 + 2 * (_MAX_LEN - 4) + 1
    priority = 50
    # A candidate of ``pattern`` is two digits, looking back at two letters; ``accept`` reads one
    # more character back and the rest forward. So a candidate cut at the start of the context
    # ends long before ``start``, and eight characters of it are enough.
    lookbehind = 8
    # An IBAN is letters, digits and single spaces, from a country code and two check digits on.
    stream_rule = RunRule(
        "abcdefghijklmnopqrstuvwxyz0123456789 ",
        re.compile("[a-z]{2}[0-9]{2}"),
        4 + 2 * (_MAX_LEN - 4) + 1,
        marker_len=4,
        partial=re.compile(r"(?:[a-z]{1,2}|[a-z]{2}[0-9])\Z"),
        trigger=re.compile("[0-9]"),
        wake=frozenset("0123456789"),
        partial_chars="abcdefghijklmnopqrstuvwxyz0123456789",
    )
    pattern = re.compile(r"[0-9]{2}(?<=[a-z]{2}[0-9]{2})(?= ?[0-9a-z])")

    def accept(self, match: re.Match[str]) -> Span | None:
        text = match.string
        start = match.start() - 2
        if start > 0 and text[start - 1].isascii() and text[start - 1].isalnum():
            return None
        length = IBAN_LENGTHS.get(text[start : start + 2])
        if length is None:
            return None
        # Bounded: the registered length plus its spaces and one character to see what follows.
        run = _GROUPS.match(text, start, start + 2 * length + 1)
        if run is None:
            return None
        end = start
        num_chars = 0
        groups: list[str] = []
        for group in run.group().split(" "):
            if num_chars + len(group) > length:
                return None  # the registered length ends inside a group: glued to more
            groups.append(group)
            num_chars += len(group)
            end += len(group)
            if num_chars == length:
                return (start, end) if iban_valid("".join(groups)) else None
            end += 1
        return None
