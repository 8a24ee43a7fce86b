"""E-mail addresses, also glued to CJK text (邮箱是zhang.san@example.com谢谢) and written the
ways people hide them from scrapers: ``zhang.san [at] example [dot] com``, ``(at)``, ``{@}``,
``zhang at example dot com``.

The local part and domain are ASCII-only classes, so neighbouring Chinese characters are never
taken into the address (``\\w`` would take them); look-alike letters (Cyrillic а) were folded to
ASCII by normalization. A bare `` at `` is an address only when something else says so (a dot,
digit, ``_`` or ``+`` in the local part, or a written-out dot in the domain): "look at example.com"
is a sentence.
"""

from __future__ import annotations

import re

from filters.detector import Span
from filters.detectors.email_holdback import EmailHoldback
from filters.detectors.pattern_detector import PatternDetector
from filters.holdback import Holdback

_MAX_LEN = 254  # RFC 5321 path limit, of the address itself
_OPEN, _CLOSE = r"[\[({<]", r"[\])}>]"
_AT = rf"(?:@|\s{{0,3}}{_OPEN}\s{{0,3}}(?:at|@)\s{{0,3}}{_CLOSE}\s{{0,3}}|(?P<word_at>\s{{1,3}}at\s{{1,3}}))"
_DOT = rf"(?:\.|\s{{0,3}}{_OPEN}\s{{0,3}}(?:dot|\.)\s{{0,3}}{_CLOSE}\s{{0,3}}|\s{{1,3}}dot\s{{1,3}})"
# A label: letters, digits and inner dashes (possessive, so a long label is read one way only).
_LABEL = r"[a-z0-9][a-z0-9-]{0,62}+(?<!-)"
_WRITTEN_DOT_MAX = 32  # room for " [at] " and a few " [dot] "; a longer match is refused


class EmailDetector(PatternDetector):
    name = "email"
    max_match_len = _MAX_LEN + _WRITTEN_DOT_MAX
    priority = 45
    pattern = re.compile(
        rf"(?<![a-z0-9._%+-])(?P<local>[a-z0-9_%+-][a-z0-9._%+-]{{0,63}}){_AT}"
        rf"(?P<domain>(?:{_LABEL}{_DOT}){{1,8}}[a-z]{{2,24}})(?![a-z0-9-])"
    )

    def holdback(self) -> Holdback:
        return EmailHoldback(self.max_match_len)

    def scan(self, text: str) -> list[Span]:
        """Like ``PatternDetector.scan``, but a refused match gives its text back: in "me at
        zhang[at]example.com" the words "me at zhang" are refused and the address starts later."""
        spans: list[Span] = []
        pos = 0
        while (match := self.pattern.search(text, pos)) is not None:
            span = self.accept(match)
            if span is None:
                pos = match.start() + 1
            else:
                spans.append(span)
                pos = span[1]
        return spans

    def accept(self, match: re.Match[str]) -> Span | None:
        if match.end() - match.start() > self.max_match_len:
            return None
        local, domain = match.group("local"), match.group("domain")
        if local.endswith(".") or len(local) + 1 + len(domain) > _MAX_LEN + _WRITTEN_DOT_MAX - 9:
            return None
        if match.group("word_at") is not None:
            written_dot = not re.fullmatch(r"[a-z0-9.-]+", domain)
            if not (written_dot or re.search(r"[._+0-9]", local)):
                return None
        return match.span()
