"""Scanning one text in bounded steps, so a long or hostile text never holds the event loop.

The gateway filters on its event loop; one scan of a whole 1 MB body used to hold it (and every
other client's ``/healthz``) for as long as the slowest detector took. Here a text is normalized
in pieces and scanned in windows, and the caller yields to the loop after every step:

    normalized  |---- segment k-1 ----|---- segment k ----|---- segment k+1 ----|
    window k                    |<-L->|-------------------|<-L->|

L is the longest match of any active detector (``Detector.max_match_len``, a true bound). A match
that starts in segment k therefore lies wholly inside window k, and window k keeps exactly the
matches that start in its segment; the L characters of left context let look-behinds and keyword
prefixes see what they would see in the whole text (the stream filter makes the same argument).
Where two kept matches from neighbouring windows overlap, the earlier one stays.

Each step costs O(SEGMENT_CHARS + 2 L) whatever a detector's complexity in its input, so the work
of a scan is linear in the text and is what ``ScanBudget`` counts. A text of at most one window is
scanned in a single step, exactly as a whole-text scan would.

Normalization is per character (see ``filters.normalized``), so normalizing the pieces and
concatenating equals normalizing the whole text.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping

from filters.action import Action
from filters.normalized import NormalizedText, normalize
from filters.scan_budget import ScanBudget
from filters.scanner import Match, Scanner, ScanOutcome

__all__ = ["PIECE_CHARS", "SEGMENT_CHARS", "normalize_in_steps", "scan_in_windows", "windowed_scan"]

SEGMENT_CHARS = 1024
"""Normalized characters each window owns; one window is scanned per step."""

PIECE_CHARS = 16384
"""Original characters normalized per step (normalization is cheap next to scanning)."""

Steps = Generator[None, None, tuple[NormalizedText, ScanOutcome]]
"""Yields after each bounded step; returns the normalized text and the scan's outcome."""


def windowed_scan(scanner: Scanner, actions: Mapping[str, Action], text: str, budget: ScanBudget) -> Steps:
    """Normalize and scan ``text`` in steps; raises ``ScanBudgetError`` once its work passes ``budget``."""
    norm = yield from normalize_in_steps(text, budget)
    reach = scanner.max_match_len(actions, rewriting_only=False)
    outcome = yield from scan_in_windows(lambda window: scanner.scan(window, actions), norm.text, reach)
    return norm, outcome


def scan_in_windows(
    scan: Callable[[str], ScanOutcome], text: str, reach: int
) -> Generator[None, None, ScanOutcome]:
    """``scan(text)`` window by window (module docstring), for any normalized ``text``; ``reach``
    is the longest match of any active detector."""
    n = len(text)
    if n <= SEGMENT_CHARS + 2 * reach:
        return scan(text)
    kept: list[Match] = []
    for begin in range(0, n, SEGMENT_CHARS):
        end = min(n, begin + SEGMENT_CHARS)
        left = max(0, begin - reach)
        outcome = scan(text[left : min(n, end + reach)])
        if outcome.failed is not None:
            return outcome
        for m in outcome.matches:
            start = m.start + left
            if begin <= start < end and (not kept or kept[-1].end <= start):
                kept.append(Match(start, m.end + left, m.detector, m.action))
        yield
    return ScanOutcome(kept, None)


def normalize_in_steps(text: str, budget: ScanBudget) -> Generator[None, None, NormalizedText]:
    """``normalize(text)`` a piece per step, charging the budget for what it reads and adds."""
    budget.charge(len(text))
    if len(text) <= PIECE_CHARS:
        norm = normalize(text)
        budget.charge(max(0, len(norm.text) - len(text)))
        return norm
    texts: list[str] = []
    starts: list[int] = []
    identity = True
    for begin in range(0, len(text), PIECE_CHARS):
        piece = normalize(text[begin : begin + PIECE_CHARS])
        budget.charge(max(0, len(piece.text) - len(piece.original)))
        if identity and piece.starts is not None:
            identity = False
            starts = list(range(sum(len(t) for t in texts)))
        if not identity:
            starts.extend(
                range(begin, begin + len(piece.text))
                if piece.starts is None
                else (begin + s for s in piece.starts)
            )
        texts.append(piece.text)
        yield
    return NormalizedText(text, "".join(texts), None if identity else starts)
