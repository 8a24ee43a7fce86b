"""A progress bar for the CLI's long commands, drawn only on a terminal.

The library functions report progress through a plain ``(done, total)`` callback and know nothing
of click; this draws it on stderr when stderr is a terminal, so a pipe or a log gets the result
lines alone.
"""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["ProgressBar"]


class ProgressBar:
    """A ``(done, total)`` callback that draws a bar on stderr on a terminal, nothing elsewhere.

    ``done`` is cumulative; the bar is created at the first call, sized by that call's ``total``."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._bar: Any = None
        self._shown = 0

    def __enter__(self) -> ProgressBar:
        return self

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if not sys.stderr.isatty():
                return
            self._bar = click.progressbar(length=max(total, 1), label=self._label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done - self._shown)
        self._shown = done

    @property
    def drawn(self) -> bool:
        """Whether a bar was drawn (stderr is a terminal and progress was reported)."""
        return self._bar is not None

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
