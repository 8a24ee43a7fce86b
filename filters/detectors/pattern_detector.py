"""A detector made of one regular expression and a validation of each candidate."""

from __future__ import annotations

import re

from filters.detector import Span


class PatternDetector:
    """Subclasses set the class attributes and override ``accept`` to validate a candidate."""

    name: str = ""
    max_match_len: int = 0
    priority: int = 0
    pattern: re.Pattern[str] = re.compile(r"(?!)")

    def scan(self, text: str) -> list[Span]:
        spans: list[Span] = []
        for match in self.pattern.finditer(text):
            span = self.accept(match)
            if span is not None:
                spans.append(span)
        return spans

    def accept(self, match: re.Match[str]) -> Span | None:
        return match.span()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
