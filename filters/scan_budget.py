"""How much filter work one request or one response may cost, counted in characters.

A wall-clock budget failed valid requests whenever the machine was merely busy, and could not
stop a detector that was already running. Work is counted instead: every original character a
scan reads, plus whatever normalization adds (NFKC can expand one character to many). A scan
is linear in the characters it reads (``filters.windowed_scan``), so this bounds its time on
any machine, and the same input always gets the same answer.
"""

from __future__ import annotations

from filters.errors import ScanBudgetError

__all__ = ["ScanBudget"]


class ScanBudget:
    def __init__(self, max_chars: int, *, free_chars: int = 0) -> None:
        """``free_chars``: characters the scan adds itself (the newlines joining a conversation)."""
        self.max_chars = max_chars
        self.num_chars = -free_chars

    def __repr__(self) -> str:
        return f"ScanBudget(num_chars={self.num_chars}, max_chars={self.max_chars})"

    def charge(self, num_chars: int) -> None:
        """Count work about to be done; raises ``ScanBudgetError`` (before doing it) past the limit."""
        self.num_chars += num_chars
        if self.num_chars > self.max_chars:
            raise ScanBudgetError(self.max_chars)
