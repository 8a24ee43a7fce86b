"""CN mobile numbers: 1[3-9]x xxxx xxxx, optionally +86 / 0086, grouped 3-4-4 by spaces or dashes."""

from __future__ import annotations

import re

from filters.detectors.pattern_detector import PatternDetector


class CnMobileDetector(PatternDetector):
    name = "cn_mobile"
    max_match_len = len("0086-138-1234-5678")
    priority = 40
    pattern = re.compile(r"(?<![0-9a-z+])(?:(?:\+|00)86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}(?![0-9a-z])")
