"""E-mail addresses, also glued to CJK text (邮箱是zhang.san@example.com谢谢).

The local part and domain are ASCII-only classes, so neighbouring Chinese characters are never
taken into the address (``\\w`` would take them).
"""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector

_MAX_LEN = 254  # RFC 5321 path limit


class EmailDetector(PatternDetector):
    name = "email"
    max_match_len = _MAX_LEN
    priority = 45
    pattern = re.compile(
        r"(?<![a-z0-9._%+-])[a-z0-9_%+-][a-z0-9._%+-]{0,63}@"
        r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.){1,8}[a-z]{2,24}(?![a-z0-9-])"
    )

    def accept(self, match: re.Match[str]) -> Span | None:
        return match.span() if match.end() - match.start() <= _MAX_LEN else None
