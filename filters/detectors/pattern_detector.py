"""A detector made of one regular expression and a validation of each candidate."""

from __future__ import annotations

import re

from filters.detector import Span
from filters.holdback import CapHoldback, Holdback, RunHoldback, RunRule


class PatternDetector:
    """Subclasses set the class attributes and override ``accept`` to validate a candidate."""

    name: str = ""
    max_match_len: int = 0
    priority: int = 0
    pattern: re.Pattern[str] = re.compile(r"(?!)")
    span_lead: int = 0
    """How far before its span a candidate of ``pattern`` can begin (a key before its value)."""
    stream_rule: RunRule | None = None
    """How a stream holds back for this detector (``filters.holdback``); None: ``max_match_len``."""

    @property
    def lookbehind(self) -> int:
        """Context before ``start`` that ``scan_from`` needs: a key before its value, and one
        longest match more. A candidate that began earlier consumes the text it covers, so the
        pattern's matches only line up with the whole text's once a candidate that may be cut
        at the start of the context has ended; one cut there ends before ``start``."""
        return self.span_lead + self.max_match_len + 1

    def scan(self, text: str) -> list[Span]:
        spans: list[Span] = []
        for match in self.pattern.finditer(text):
            span = self.accept(match)
            if span is not None:
                spans.append(span)
        return spans

    def scan_from(self, text: str, start: int) -> list[Span]:
        return [span for span in self.scan(text) if span[0] >= start]

    def holdback(self) -> Holdback:
        if self.stream_rule is None:
            return CapHoldback(self.max_match_len)
        return RunHoldback(self.stream_rule)

    def accept(self, match: re.Match[str]) -> Span | None:
        return match.span()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
