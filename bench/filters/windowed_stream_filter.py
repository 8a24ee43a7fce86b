"""The stream filter as it was before issue 19, kept as the peer of ``bench.filters.stream``.

Every delta re-normalized and re-scanned a window of the whole held text (the longest match of
any rewriting detector, 285 characters with the packaged policy) plus as much left context,
with every active detector. Not used by the gateway.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from common.finding import Finding
from filters.action import Action, Direction
from filters.context import StreamStep
from filters.finding_tally import FindingTally
from filters.normalized import NormalizedText, normalize
from filters.rewrite import FAILED_PLACEHOLDER, rewrite
from filters.scanner import Match, Scanner

__all__ = ["WindowedStreamFilter"]
from filters.windowed_scan import SEGMENT_CHARS

_BLOCKED = StreamStep(release="", blocked=True)


class WindowedStreamFilter:
    def __init__(self, scanner: Scanner, actions: Mapping[str, Action], *, on_error: Action) -> None:
        self._scanner = scanner
        self._actions = actions
        self._on_error = on_error
        self.hold_len = scanner.max_match_len(actions, rewriting_only=True) - 1
        """Normalized characters always held back (L - 1)."""
        self._context_len = max(scanner.max_match_len(actions, rewriting_only=False), self.hold_len + 1)
        self._buffer = ""
        self._released = 0
        """Original characters at the head of the buffer that are already handled."""
        self._tally = FindingTally(Direction.RESPONSE)
        self._blocked = False
        self._finished = False

    def __repr__(self) -> str:
        return f"WindowedStreamFilter(held={len(self._buffer) - self._released}, blocked={self._blocked})"

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self._tally.findings()

    def feed(self, delta: str) -> StreamStep:
        """Each step scans what is held back plus the new text; a long delta is taken in pieces
        of ``SEGMENT_CHARS`` so that one step's cost stays bounded whatever the engine sends."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else StreamStep(release="", blocked=False)
        released: list[str] = []
        for begin in range(0, max(1, len(delta)), SEGMENT_CHARS):
            self._buffer += delta[begin : begin + SEGMENT_CHARS]
            step = self._advance(final=False)
            if step.blocked:
                return step
            released.append(step.release)
        return StreamStep(release="".join(released), blocked=False)

    def finish(self) -> StreamStep:
        """Flush what is held back at the end of the stream."""
        if self._blocked or self._finished:
            return _BLOCKED if self._blocked else StreamStep(release="", blocked=False)
        step = self._advance(final=True)
        self._finished = True
        return step

    def _advance(self, *, final: bool) -> StreamStep:
        norm = normalize(self._buffer)
        outcome = self._scanner.scan(norm.text, self._actions)
        if outcome.failed is not None:
            return self._fail(outcome.failed)
        n = len(norm.text)
        ctx = _normalized_index(norm, self._released)
        release = n if final else self._release_point(norm, outcome.matches, ctx, max(ctx, n - self.hold_len))
        final_matches = []
        for match in outcome.matches:
            if ctx < match.end <= release:
                final_matches.append(match)
                self._tally.add(match.detector, match.action)
        if any(m.action is Action.BLOCK for m in final_matches):
            self._blocked = True
            self._buffer = ""
            return _BLOCKED
        release_at = norm.original_index(release) if release < n else len(self._buffer)
        text = rewrite(norm, final_matches, self._released, release_at)
        self._keep_context(norm, release, release_at)
        return StreamStep(release=text, blocked=False)

    @staticmethod
    def _release_point(norm: NormalizedText, matches: list[Match], ctx: int, release: int) -> int:
        """Move ``release`` left until no match straddles it and it starts an original character
        (one character can expand to several normalized ones: "ﬁ" -> "fi")."""
        while True:
            moved = release
            if norm.starts is not None and release < len(norm.text):
                moved = max(ctx, bisect.bisect_left(norm.starts, norm.starts[release]))
            for match in matches:
                if match.end > ctx and match.start < moved < match.end:
                    moved = max(ctx, match.start)
            if moved == release:
                return release
            release = moved

    def _keep_context(self, norm: NormalizedText, release: int, release_at: int) -> None:
        keep_from = norm.original_index(max(0, release - self._context_len))
        self._buffer = self._buffer[keep_from:]
        self._released = release_at - keep_from

    def _fail(self, detector: str) -> StreamStep:
        self._tally.add(f"detector_failed:{detector}", self._on_error)
        if self._on_error is Action.BLOCK:
            self._blocked = True
            self._buffer = ""
            return _BLOCKED
        held = len(self._buffer) > self._released
        self._buffer = ""
        self._released = 0
        return StreamStep(release=FAILED_PLACEHOLDER if held else "", blocked=False)


def _normalized_index(norm: NormalizedText, original_index: int) -> int:
    """First normalized character that comes from original_index or later."""
    if norm.starts is None:
        return original_index
    return bisect.bisect_left(norm.starts, original_index)
