"""Runs of digit groups: the shape of every digit-based value, however a person separates it.

A *run* is a maximal sequence of digit groups joined by separator runs: at most
``MAX_SEPARATOR_RUN`` characters of whitespace (newlines, double spaces), ``.``, ``/``, ``\\``,
``_`` or ``-`` (normalization has already turned en/em dashes into ``-``, other scripts' digits
into ASCII and dropped zero-width characters). A detector reads its values off a run through
*windows*, consecutive groups whose digits make one value:

    normalized  "卡号 2024/01/15  6222.0212 3456-7890 128，谢谢"
    run         2024 01 15 6222 0212 3456 7890 128      (one run: the date is part of it)
    windows     the whole run (any grouping: "4 1 1 1 …" is typed too), or consecutive groups of
                at least three digits each ("6222 0212 3456 7890 128"), which is how people
                group a value they write next to other numbers.

Cost is linear: one regular-expression pass finds runs and groups, and a window grows from a
group only while its digits fit the longest value (a group of three or more digits each step).
A window's verdict depends on nothing more than ``LOOKAROUND`` characters beyond its ends
(the separator run and the character that ends the run), which the stream filter's hold-back
covers because detectors add ``LOOKAROUND`` to their ``max_match_len``.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from filters.holdback import WHITESPACE, RunRule

MAX_SEPARATOR_RUN = 4
LOOKAROUND = MAX_SEPARATOR_RUN + 1
MIN_TYPED_GROUP = 3
_SEPARATOR = r"[\s._/\\-]"
_RUN = re.compile(rf"[0-9]+(?:{_SEPARATOR}{{1,{MAX_SEPARATOR_RUN}}}[0-9]+)*+")
_GROUP = re.compile(r"[0-9]+")
_LETTER = frozenset("abcdefghijklmnopqrstuvwxyz")
ASCII_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")
SEPARATOR_CHARS = WHITESPACE + "._/\\-"
"""Every character ``_SEPARATOR`` matches."""
_RUN_CHARS = "0123456789" + SEPARATOR_CHARS
RUN_CONTEXT = 256
"""How far before ``start`` a scan from ``start`` looks for the beginning of the run it starts
in: a run's groups and whether it is uniform depend on all of it. A longer run is read from
there on, as a window of the whole-text scan (``filters.windowed_scan``) reads it."""


def run_rule(max_match_len: int, extra: str = "", marker: str = "[0-9]") -> RunRule:
    """How a stream holds back for a detector of digit runs: from the first digit (or ``extra``
    marker) of the trailing stretch of digits, separators and ``extra`` characters, since a run
    and the character that ends it consist of nothing else (``filters.holdback``)."""
    return RunRule(
        members="0123456789" + SEPARATOR_CHARS + extra,
        marker=re.compile(marker),
        max_match_len=max_match_len,
        trigger=re.compile("[0-9]"),
        wake=frozenset("0123456789" + ("+" if "+" in marker else "")),
    )


class DigitRun(NamedTuple):
    groups: list[tuple[int, int]]
    """[start, end) of each digit group, normalized offsets."""
    is_uniform: bool
    """Every separator in the run is the same string: one number written one way."""
    before: str
    """The character before the first digit ('' at the start of the text)."""
    after: str
    """The character after the last digit ('' at the end of the text)."""

    @property
    def start(self) -> int:
        return self.groups[0][0]

    @property
    def end(self) -> int:
        return self.groups[-1][1]

    @property
    def glued_before(self) -> bool:
        """A letter right before the digits makes them part of a code (``de89``, ``no4111``)."""
        return self.before in _LETTER

    @property
    def glued_after(self) -> bool:
        return self.after in _LETTER


class Window(NamedTuple):
    first: int
    last: int
    """Indices of the first and last group (inclusive)."""
    num_digits: int
    is_whole_run: bool


@functools.lru_cache(maxsize=2)
def digit_runs(text: str, start: int = 0) -> tuple[DigitRun, ...]:
    """Every run in the text that starts at or after ``start`` (cached: four detectors read the
    same runs in turn). ``start`` must not fall inside a run; the stream filter starts at a run's
    first digit or where no run is open (``run_rule``)."""
    runs = []
    for match in _RUN.finditer(text, start):
        start, end = match.span()
        groups = [m.span() for m in _GROUP.finditer(text, start, end)]
        separators = {text[a:b] for (_, a), (b, _) in itertools.pairwise(groups)}
        runs.append(DigitRun(groups, len(separators) <= 1, text[start - 1 : start], text[end : end + 1]))
    return tuple(runs)


def windows(run: DigitRun, min_digits: int, max_digits: int, *, in_uniform_runs: bool) -> Iterator[Window]:
    """The whole run if its digits fit, then every typed grouping (groups of three or more digits)
    with ``min_digits``..``max_digits`` digits, shortest first from each group.

    ``in_uniform_runs`` False: a run written with one separator throughout is one number, so a
    value without a strong check (Luhn only, none) is not read out of its middle:
    "6224-1113-9905-5997-08" is an 18-digit reference, not a card and two more digits. Mixed
    separators mark where one value ends: "2024/01/15 4111 1111 1111 1111 12/25"."""
    groups = run.groups
    if run.end - run.start < min_digits:
        return  # most runs: a year, an amount, a count
    if run.end - run.start <= max_digits * (1 + MAX_SEPARATOR_RUN):
        total = sum(e - s for s, e in groups)
        if min_digits <= total <= max_digits:
            yield Window(0, len(groups) - 1, total, True)
    if run.is_uniform and not in_uniform_runs:
        return
    for first, (start, end) in enumerate(groups):
        if end - start < MIN_TYPED_GROUP:
            continue
        total = 0
        for last in range(first, len(groups)):
            size = groups[last][1] - groups[last][0]
            if size < MIN_TYPED_GROUP:
                break
            total += size
            if total > max_digits:
                break
            if total >= min_digits and not (first == 0 and last == len(groups) - 1):
                yield Window(first, last, total, False)


def window_digits(text: str, run: DigitRun, window: Window) -> str:
    return "".join(text[s:e] for s, e in run.groups[window.first : window.last + 1])


def window_span(run: DigitRun, window: Window) -> tuple[int, int]:
    return run.groups[window.first][0], run.groups[window.last][1]


def glued(run: DigitRun, window: Window) -> bool:
    """Is the window's value glued to letters (part of a code, not a value of its own)?"""
    return (window.first == 0 and run.glued_before) or (
        window.last == len(run.groups) - 1 and run.glued_after
    )


def scan_windows(
    text: str,
    min_digits: int,
    max_digits: int,
    accept: Callable[[DigitRun, Window], tuple[int, int] | None],
    *,
    in_uniform_runs: bool,
    start: int = 0,
) -> list[tuple[int, int]]:
    """Spans of the windows ``accept`` takes that start at ``start`` or later, the runs read
    whole (``run_start``); a run taken whole is not searched further."""
    spans = []
    for run in digit_runs(text, run_start(text, start)):
        for window in windows(run, min_digits, max_digits, in_uniform_runs=in_uniform_runs):
            span = accept(run, window)
            if span is not None:
                if span[0] >= start:
                    spans.append(span)
                if window.is_whole_run:
                    break
    return spans


def run_start(text: str, start: int) -> int:
    """Where the run (or the stretch of separators) that ``start`` lies in begins."""
    head = text[max(0, start - RUN_CONTEXT) : start]
    return start - (len(head) - len(head.rstrip(_RUN_CHARS)))
