"""Masked forms of a value: enough left to recognise it, not enough to use it.

    payment_card  6222 0212 3456 7890  ->  6222 **** **** 7890   (first 4 and last 4 digits)
    cn_mobile     138 1234 5678        ->  138 **** 5678         (first 3 and last 4 digits)
    email         zhang.san@example.com -> z********@example.com
    other         keep the last 4 letters or digits
Separators stay where they were; format characters (zero-width) are dropped.
"""

from __future__ import annotations

import unicodedata

_KEEP_EDGES: dict[str, tuple[int, int]] = {
    "payment_card": (4, 4),
    "cn_mobile": (3, 4),
    "cn_resident_id": (6, 4),
    "iban": (4, 4),
    "phone": (0, 4),
    "us_ssn": (0, 4),
    "secret": (4, 0),
}


def mask(detector: str, value: str, *, is_whole: bool = True) -> str:
    """``is_whole`` False: the value is a piece of a match (cut by a message boundary), whose
    edges are not the value's edges; every letter and digit is hidden."""
    value = "".join(ch for ch in value if unicodedata.category(ch) != "Cf")
    if not is_whole:
        return "".join("*" if ch.isalnum() else ch for ch in value)
    if detector == "email" and "@" in value:
        local, _, domain = value.rpartition("@")
        return local[:1] + "*" * (len(local) - 1) + "@" + domain
    head, tail = _KEEP_EDGES.get(detector, (0, 4))
    positions = [i for i, ch in enumerate(value) if ch.isalnum()]
    if len(positions) <= head + tail:
        return "*" * len(value)
    hidden = set(positions[head : len(positions) - tail])
    return "".join("*" if i in hidden else ch for i, ch in enumerate(value))
