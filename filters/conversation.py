"""The texts of one request scanned as one text, so that a value split across messages is seen.

A card number, key or keyword cut in two, half in the system prompt and half in the user turn,
or over two user turns, or inside a tool result, is as readable to the model as one written
whole; each text alone shows only a harmless half. Two scans see it:

1. the texts joined with a newline, scanned once: a separator the digit-group and keyword
   detectors read across ("4111 1111" + "\n" + "1111 1111" is a card, "洗" + "\n" + "钱" a
   keyword) and that keeps an address or a number at a text's edge apart from its neighbour;
2. at each boundary, the last and first ``reach`` normalized characters of the two texts glued
   with nothing between them, for values that no separator may cut ("AKIAIOSF" + "ODNN7EXAMPLE").
   Only matches that cross the boundary are taken from it, where the first scan found nothing.

    texts     ["card 4111 1111", "1111 1111 ok"]
    joined    "card 4111 1111\n1111 1111 ok"      match [5, 24) -> masked in both texts
    offsets   [0, 15]                               text i starts at offsets[i] in the joined text

A match cut by a text boundary is hidden whole in each piece (masking keeps no edge of a piece).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Sequence

from filters.normalized import NormalizedText, normalize
from filters.rewrite import rewrite
from filters.scanner import Match, ScanOutcome
from filters.windowed_scan import scan_in_windows

SEPARATOR = "\n"


class Conversation:
    __slots__ = ("norm", "offsets", "texts")

    def __init__(self, texts: Sequence[str], norm: NormalizedText | None = None) -> None:
        """``norm``: the joined texts already normalized (in steps: ``filters.windowed_scan``)."""
        self.texts = list(texts)
        offsets = []
        position = 0
        for text in self.texts:
            offsets.append(position)
            position += len(text) + len(SEPARATOR)
        self.offsets = offsets
        self.norm: NormalizedText = norm or normalize(SEPARATOR.join(self.texts))

    def __repr__(self) -> str:
        return f"Conversation(num_texts={len(self.texts)}, len={len(self.norm.original)})"

    def scan(self, scan: Callable[[str], ScanOutcome], reach: int) -> ScanOutcome:
        """Both scans (module docstring); ``reach`` is the longest match of any active detector."""
        steps = self.scan_steps(scan, reach)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                outcome: ScanOutcome = done.value
                return outcome

    def scan_steps(
        self, scan: Callable[[str], ScanOutcome], reach: int
    ) -> Generator[None, None, ScanOutcome]:
        """``scan`` in bounded steps: the joined text window by window, then each boundary."""
        outcome = yield from scan_in_windows(scan, self.norm.text, reach)
        if outcome.failed is not None or len(self.texts) < 2:
            return outcome
        matches = list(outcome.matches)
        for begin in self.offsets[1:]:
            boundary = self._normalized_index(begin - len(SEPARATOR))
            left = max(0, boundary - reach)
            right = boundary + len(SEPARATOR)
            glued = self.norm.text[left:boundary] + self.norm.text[right : right + reach]
            yield
            across = scan(glued)
            if across.failed is not None:
                return across
            cut = boundary - left
            for m in across.matches:
                if m.start < cut < m.end:
                    start, end = left + m.start, right + (m.end - cut)
                    overlapping = [k for k in matches if k.start < end and start < k.end]
                    # Kept when it overlaps nothing, or covers what it overlaps: the first scan saw
                    # "zhang@bank.example" where the texts hold "zhang@bank.example" + ".com.cn".
                    if all(start <= k.start and k.end <= end for k in overlapping):
                        matches = [k for k in matches if k not in overlapping]
                        matches.append(Match(start, end, m.detector, m.action))
        return ScanOutcome(sorted(matches), None)

    def _normalized_index(self, original_index: int) -> int:
        starts = self.norm.starts
        return original_index if starts is None else bisect.bisect_left(starts, original_index)

    def rewrite(self, matches: list[Match]) -> list[str]:
        """Every text with the rewriting matches that touch it applied."""
        if not matches:
            return list(self.texts)
        out = []
        for text, begin in zip(self.texts, self.offsets, strict=True):
            out.append(rewrite(self.norm, matches, begin, begin + len(text)))
        return out
