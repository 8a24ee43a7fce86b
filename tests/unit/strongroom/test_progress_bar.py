"""The CLI's progress bar: drawn on a terminal's stderr, nothing in a pipe or a log."""

from __future__ import annotations

import io

import click
import pytest
from click.testing import CliRunner

from strongroom.progress_bar import ProgressBar


@click.command()
def _copy() -> None:
    with ProgressBar("copying") as bar:
        for done in range(1, 11):
            bar(done, 10)
    click.echo(f"copied; bar drawn: {bar.drawn}")


def test_no_bar_when_stderr_is_not_a_terminal() -> None:
    done = CliRunner().invoke(_copy)
    assert done.exit_code == 0 and done.output == "copied; bar drawn: False\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_ends_at_100_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = _Terminal()
    monkeypatch.setattr("sys.stderr", stderr)
    with ProgressBar("copying") as bar:
        bar(0, 4)
        bar(4, 4)
    assert bar.drawn and "copying" in stderr.getvalue() and "100%" in stderr.getvalue()
