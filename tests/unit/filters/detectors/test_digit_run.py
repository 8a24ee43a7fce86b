"""Digit runs and their windows: the shapes the digit-group detectors read values from."""

from __future__ import annotations

from filters.detectors.digit_run import MAX_SEPARATOR_RUN, digit_runs, window_span, windows
from filters.normalized import normalize


def spans(text: str, low: int, high: int, *, in_uniform_runs: bool = False) -> list[str]:
    norm = normalize(text).text
    out = []
    for run in digit_runs(norm):
        for window in windows(run, low, high, in_uniform_runs=in_uniform_runs):
            start, end = window_span(run, window)
            out.append(norm[start:end])
    return out


def test_any_typed_separator_run_joins_groups() -> None:
    for separator in (".", "/", "_", "\n", "  ", " - ", "\u2013", " \u2014 ", "\\", "\r\n"):
        text = f"x {separator.join(['4111', '1111', '1111', '1111'])} y"
        assert spans(text, 16, 16) == [normalize(text).text[2:-2]], repr(separator)


def test_a_longer_separator_run_ends_the_run() -> None:
    gap = " " * (MAX_SEPARATOR_RUN + 1)
    assert spans(f"4111 1111{gap}1111 1111", 16, 16) == []


def test_typed_windows_inside_a_mixed_run_but_not_a_uniform_one() -> None:
    assert spans("2024/01/15 4111 1111 1111 1111 12/25", 16, 16) == ["4111 1111 1111 1111"]
    assert spans("6224-1113-9905-5997-08", 16, 16) == []  # one number written one way
    assert spans("6224-1113-9905-5997-08", 16, 16, in_uniform_runs=True) == ["6224-1113-9905-5997"]


def test_whole_run_takes_any_grouping() -> None:
    assert spans("card 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 ok", 16, 16) == ["4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"]


def test_windows_per_group_are_bounded() -> None:
    """Windows grow from a group only while they fit the longest value: linear in the run."""
    run = digit_runs(normalize("123 456-" * 5_000).text)[0]
    assert sum(1 for _ in windows(run, 13, 19, in_uniform_runs=False)) <= 2 * len(run.groups)
