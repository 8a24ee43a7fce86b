"""Progress of an export: millions of records take a while, and the CLI draws a bar from it.

A ``Progress`` is called with (records written, records in the range); the library never draws.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "RecordCounter"]

Progress = Callable[[int, int], None]

# Reporting every record would cost more than writing it; a bar moves smoothly at this step.
REPORT_EVERY = 1024


class RecordCounter:
    """Reports records written every ``REPORT_EVERY`` records and once at the end (when given)."""

    def __init__(self, first_seq: int, last_seq: int, report: Progress | None) -> None:
        self.total = max(last_seq - first_seq + 1, 0)
        self._report = report

    def step(self, done: int) -> None:
        if self._report is not None and done % REPORT_EVERY == 0:
            self._report(done, self.total)

    def finish(self, done: int) -> None:
        if self._report is not None:
            self._report(done, max(self.total, done))
