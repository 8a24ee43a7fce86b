"""Progress of the long key operations (sealing or verifying gigabytes takes seconds to minutes).

A ``Progress`` is called with (bytes done, bytes in all) after each chunk; the CLI draws a bar
from it. Counting plaintext bytes keeps the figure the same for sealing and verifying (unsealing
counts them twice: checked, then written); rotation counts models rewrapped.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ByteCounter", "Progress"]

Progress = Callable[[int, int], None]


class ByteCounter:
    """Adds up the bytes processed and reports each step to ``report`` (when given)."""

    def __init__(self, total: int, report: Progress | None) -> None:
        self.total = total
        self.done = 0
        self._report = report

    def add(self, num_bytes: int) -> None:
        self.done += num_bytes
        if self._report is not None:
            self._report(self.done, self.total)
