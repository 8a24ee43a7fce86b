"""How far a stream holds back for the secret detector.

Three shapes, and the hold point is the earliest of them:

- a token or an assigned value (``akia…``, ``sk-…``, ``password = hunter22``): the reported
  span is one word of non-space, non-quote characters, so the trailing such word is held;
- a private-key header still being written: from a ``-----`` (or a cut-off ``-``) in the
  trailing run of header characters;
- an open private-key block: its match runs from the header to the ``END`` line, or to the end
  of the stream while that line has not arrived, so everything from the header is held,
  however long, until the block closes.

Each call reads the new characters and at most one header's length before them.
"""

from __future__ import annotations

import re

from filters.holdback import Holdback, RunHoldback, RunRule, TriggerWatch

__all__ = ["SecretHoldback"]

_HEADER_LEN = len("-----begin ") + 24 + len(" private key-----")
_HEADER = re.compile(r"-----begin [a-z0-9 ]{0,24}private key-----")
_END = re.compile(r"-----end [a-z0-9 ]{0,24}private key-----")
_LAST_WORD_STOP = re.compile(r"[\s\"'](?=[^\s\"']*\Z)")
"""The space or quote before the last word (each candidate looks ahead one word: linear)."""
_HEADER_RULE = RunRule(
    members="-abcdefghijklmnopqrstuvwxyz0123456789 ",
    marker=re.compile("-----"),
    max_match_len=_HEADER_LEN,
    marker_len=5,
    partial=re.compile(r"-{1,4}\Z"),
)


class SecretHoldback:
    __slots__ = ("_block_start", "_header", "_header_from", "_lead", "_max_keep", "_trigger", "_word_start")

    def __init__(self, max_match_len: int, trigger: re.Pattern[str], trigger_len: int, lead: int) -> None:
        """``trigger``: what every match contains or has just before it (a header, a token's
        prefix, a key and its ``=``), at most ``trigger_len`` characters that start at most
        ``lead`` characters before the match."""
        self._lead = lead
        self._trigger = TriggerWatch(trigger, trigger_len)
        self._max_keep = max_match_len - 1
        self._word_start = 0
        self._header: Holdback = RunHoldback(_HEADER_RULE)
        self._block_start: int | None = None
        self._header_from = 0
        """Headers before this were read already (or lie inside a closed block)."""

    def advance(self, text: str, base: int, begin: int) -> int:
        n = base + len(text)
        self._trigger.read(text, base, begin)
        last_stop = _LAST_WORD_STOP.search(text, begin - base)
        if last_stop is not None:
            self._word_start = base + last_stop.end()
        hold = max(self._word_start, n - self._max_keep)
        hold = min(hold, self._header.advance(text, base, begin))
        self._track_block(text, base, begin)
        if self._block_start is not None:
            hold = min(hold, self._block_start)
        return hold

    def _track_block(self, text: str, base: int, begin: int) -> None:
        while True:
            if self._block_start is None:
                lo = max(self._header_from, begin - _HEADER_LEN, base)
                header = _HEADER.search(text, lo - base)
                if header is None:
                    return
                self._block_start = base + header.start()
                self._header_from = base + header.end()
            lo = max(self._header_from, begin - _HEADER_LEN, base)
            end = _END.search(text, lo - base)
            if end is None:
                return
            self._block_start = None
            self._header_from = base + end.end()

    @property
    def wake(self) -> frozenset[str] | None:
        return None

    def may_match(self, start: int) -> bool:
        latest = self._trigger.latest
        return latest >= 0 and latest >= start - self._lead
