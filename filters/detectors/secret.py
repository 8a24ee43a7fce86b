"""Secrets: private-key blocks, cloud access keys, well-known token prefixes, and high-entropy
values assigned to a secret-sounding key.

Text arrives case-folded, so patterns are lower case. A private-key match runs from its
``BEGIN`` line to the ``END`` line, or to the end of the text while the ``END`` line has not
arrived yet; the stream filter therefore holds everything after a header until the block closes,
and ``max_match_len`` only needs to bound the header.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from filters.detector import Span
from filters.detectors.pattern_detector import PatternDetector
from filters.detectors.secret_holdback import SecretHoldback, SecretShape
from filters.holdback import Holdback

_PRIVATE_KEY = (
    r"-----begin [a-z0-9 ]{0,24}private key-----"
    r"(?:.*?-----end [a-z0-9 ]{0,24}private key-----|.*\Z)"
)
_TOKENS = (
    r"(?:"
    r"(?:akia|asia|abia|acca)[0-9a-z]{16}"  # AWS access key ids
    r"|gh[pousr]_[0-9a-z]{36}"  # GitHub tokens
    r"|github_pat_[0-9a-z_]{82}"
    r"|glpat-[0-9a-z_-]{20}"  # GitLab
    r"|xox[abposr]-[0-9a-z-]{10,72}"  # Slack
    r"|sk-(?:proj-|ant-)?[0-9a-z_-]{20,160}"  # OpenAI / Anthropic style
    r"|sk_(?:live|test)_[0-9a-z]{24,99}"  # Stripe
    r"|aiza[0-9a-z_-]{35}"  # Google API keys
    r"|ltai[0-9a-z]{12,20}"  # Alibaba Cloud AccessKey ids
    r")(?![a-z0-9])"
)
_ASSIGN_KEY = r"[a-z0-9_-]{0,16}[\"']?[ \t]{0,3}[:=]"
_ASSIGN = rf"{_ASSIGN_KEY}[ \t]{{0,3}}[\"']?"
_PW_NAMES = r"(?:passw(?:or)?d|pwd|口令|密码)"
_KEY_NAMES = r"(?:api[_-]?key|secret|token|access[_-]?key|auth|credential|密钥)"
_PASSWORD = rf"{_PW_NAMES}{_ASSIGN}([^\s\"']{{6,128}})"
_ASSIGNED = rf"{_KEY_NAMES}{_ASSIGN}([a-z0-9+/=_.~-]{{16,128}})"
_TOKEN_PREFIXES = (
    "akia", "asia", "abia", "acca", *(f"gh{c}_" for c in "pousr"), "github_pat_", "glpat-",
    *(f"xox{c}-" for c in "abposr"), "sk-", "sk_", "aiza", "ltai",
)  # fmt: skip
_ASSIGNMENT = rf"{_PW_NAMES}{_ASSIGN_KEY}|{_KEY_NAMES}{_ASSIGN_KEY}"
_MIN_ENTROPY_BITS = 3.0
_HEADER_LEN = len("-----begin ") + 24 + len(" private key-----")


def shannon_entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


class SecretDetector(PatternDetector):
    name = "secret"
    # The longest key name, its assignment and a 128-character value (left context included).
    max_match_len = max(_HEADER_LEN, len("github_pat_") + 82, len("credential") + 16 + 9 + 128)
    priority = 70
    span_lead = len("credential") + 16 + 9
    """An assigned value is reported without its key and the ``=`` before it."""
    # Three passes, each starting on a literal so re's prefix scan can skip ahead.
    private_key = re.compile(_PRIVATE_KEY, re.DOTALL)
    token = re.compile(_TOKENS)
    pattern = re.compile(rf"{_PASSWORD}|{_ASSIGNED}")

    def scan(self, text: str) -> list[Span]:
        spans = [m.span() for m in self.private_key.finditer(text)] if "-----begin" in text else []
        for match in self.token.finditer(text):
            start = match.start()
            if start == 0 or not (text[start - 1].isascii() and text[start - 1].isalnum()):
                spans.append(match.span())
        spans.extend(super().scan(text))
        return spans

    def holdback(self) -> Holdback:
        return SecretHoldback(_SHAPE, _QUIET)

    def accept(self, match: re.Match[str]) -> Span | None:
        if match.group(1) is not None:
            return match.span(1)
        value = match.group(2)
        has_digit = any(ch.isdigit() for ch in value)
        has_alpha = any(ch.isalpha() for ch in value)
        if has_digit and has_alpha and shannon_entropy(value) >= _MIN_ENTROPY_BITS:
            return match.span(2)
        return None


_SHAPE = SecretShape(
    assignment=re.compile(_ASSIGNMENT),
    assignment_len=len("credential") + 16 + 1 + 3 + 1,
    lead=SecretDetector.span_lead,
    token_prefixes=_TOKEN_PREFIXES,
    max_match_len=SecretDetector.max_match_len,
)
_QUIET = _SHAPE.quiet(_SHAPE.token_rule())
