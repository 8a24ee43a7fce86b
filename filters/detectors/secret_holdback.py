"""How far a stream holds back for the secret detector.

Four shapes, and the hold point is the earliest of them:

- a token (``akia…``, ``sk-…``, ``ghp_…``): a run of ``[0-9a-z_-]`` that starts with a known
  prefix, held from the prefix (or from a cut-off prefix at the end: ``sk``);
- an assigned value (``password = hunter22``, ``api_key: "…"``): the reported span is the word
  after a key and its ``=``, so the trailing word is held while it may be that value;
- a private-key header still being written: from a ``-----`` (or a cut-off ``-``) in the
  trailing run of header characters;
- an open private-key block: its match runs from the header to the ``END`` line, or to the end
  of the stream while that line has not arrived, so everything from the header is held,
  however long, until the block closes.

So prose, Chinese text without spaces included, is held for at most a cut-off prefix. Each
call reads the new characters and at most one header's length before them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from filters.holdback import Quiet, RunHoldback, RunRule, TriggerWatch

__all__ = ["SecretHoldback", "SecretShape"]

_HEADER_LEN = len("-----begin ") + 24 + len(" private key-----")
_HEADER = re.compile(r"-----begin [a-z0-9 ]{0,24}private key-----")
_END = re.compile(r"-----end [a-z0-9 ]{0,24}private key-----")
_LAST_WORD_STOP = re.compile(r"(?s:.*)[\s\"']")
"""Up to the space or quote before the last word: ``(?s:.*)`` gives back one character at a time
from the end, so only the last word is read twice."""
_HEADER_RULE = RunRule(
    members="-abcdefghijklmnopqrstuvwxyz0123456789 ",
    marker=re.compile("-----"),
    max_match_len=_HEADER_LEN,
    marker_len=5,
    partial=re.compile(r"-{1,4}\Z"),
    wake=frozenset("-"),
)
_RUN_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz_-"
_VALUE_GAP = 4
"""Characters between a key's ``=`` and its value: ``[ \\t]{0,3}`` and a quote."""


@dataclass(frozen=True, slots=True)
class SecretShape:
    """The parts of the secret detector's patterns a stream needs (``filters.detectors.secret``)."""

    assignment: re.Pattern[str]
    """A key and its ``=``."""
    assignment_len: int
    """The longest text ``assignment`` matches."""
    lead: int
    """How far before its value a key can start."""
    token_prefixes: tuple[str, ...]
    """Every literal a token starts with (character classes spelled out)."""
    max_match_len: int

    def token_rule(self) -> RunRule:
        return _token_rule(self.token_prefixes, self.max_match_len)

    def quiet(self, token_rule: RunRule) -> Quiet:
        """Idle means no token prefix, header, open block or recent key. Text without ``:``,
        ``=`` (a key's assignment), ``-`` (a header; some prefixes) and ``_`` (the other
        prefixes) and without a prefix of letters (``akia``) keeps it so; the hold point is
        then the token rule's (a cut-off prefix in the trailing run of token characters), as a
        header cut off by the end needs a ``-`` at the end."""
        return Quiet(
            wake=frozenset(":=-_"),
            keep=token_rule.marker_len - 1,
            outside=re.compile("[^" + re.escape(_RUN_CHARS) + "]"),
            marker=token_rule.marker,
            marker_len=token_rule.marker_len,
        )


@functools.lru_cache(maxsize=16)
def _token_rule(token_prefixes: tuple[str, ...], max_match_len: int) -> RunRule:
    # Built once per shape, not per stream: the prefixes' escapes and the pattern cache lookups
    # were most of a stream filter's set-up (bench/BENCHMARKS.md, 2026-12-04).
    cut = {p[:k] for p in token_prefixes for k in range(1, len(p))}
    return RunRule(
        members=_RUN_CHARS,
        marker=_prefix_marker(token_prefixes),
        max_match_len=max_match_len,
        marker_len=max(map(len, token_prefixes)),
        partial=re.compile(rf"(?<![a-z0-9])(?:{'|'.join(map(re.escape, sorted(cut)))})\Z"),
    )


def _prefix_marker(token_prefixes: tuple[str, ...]) -> re.Pattern[str]:
    """A prefix not preceded by ``[a-z0-9]``, spelled to begin with a class of first characters:
    the regex engine then skips to the next one without trying every prefix at every position
    (7 us to 0.5 us over 384 characters of prose, bench/BENCHMARKS.md)."""
    by_first: dict[str, list[str]] = {}
    for prefix in token_prefixes:
        by_first.setdefault(prefix[0], []).append(re.escape(prefix[1:]))
    firsts = "".join(map(re.escape, by_first))
    groups = "|".join(f"(?<={re.escape(first)})(?:{'|'.join(rests)})" for first, rests in by_first.items())
    return re.compile(rf"[{firsts}](?<![a-z0-9].)(?:{groups})")


class SecretHoldback:
    __slots__ = (
        "_assigning",
        "_assignment",
        "_block_start",
        "_header",
        "_header_from",
        "_lead",
        "_max_keep",
        "_quiet",
        "_token",
        "_word_start",
    )

    def __init__(self, shape: SecretShape, quiet: Quiet) -> None:
        self._lead = shape.lead
        self._assignment = TriggerWatch(shape.assignment, shape.assignment_len)
        self._assigning = False
        """The last word may be the value of the last key (or hold the key itself)."""
        self._max_keep = shape.max_match_len - 1
        self._word_start = 0
        self._token = RunHoldback(shape.token_rule())
        self._header = RunHoldback(_HEADER_RULE)
        self._quiet = quiet
        self._block_start: int | None = None
        self._header_from = 0
        """Headers before this were read already (or lie inside a closed block)."""

    def advance(self, text: str, base: int, begin: int) -> int:
        n = base + len(text)
        if text.find(":", begin - base) != -1 or text.find("=", begin - base) != -1:
            self._assignment.read(text, base, begin)  # a new one ends in the new text, at its [:=]
        last_stop = _LAST_WORD_STOP.match(text, begin - base)
        if last_stop is not None:
            self._word_start = base + last_stop.end()
        hold = self._token.advance(text, base, begin)
        assigned = self._assignment.latest
        self._assigning = assigned >= 0 and self._word_start <= assigned + self._lead + _VALUE_GAP
        if self._assigning:
            hold = min(hold, max(self._word_start, assigned, n - self._max_keep))
        hold = min(hold, self._header.advance(text, base, begin))
        if self._block_start is not None or self._header.may_match(begin - _HEADER_LEN):
            self._track_block(text, base, begin)  # a header can only end where dashes began one
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
    def quiet(self) -> Quiet | None:
        idle = self._block_start is None and not self._assigning
        return self._quiet if idle and self._token.is_idle and self._header.is_idle else None

    def may_match(self, start: int) -> bool:
        """A token starts at its prefix, a block at its header's dashes, a value after its key."""
        if self._token.may_match(start) or self._header.may_match(start):
            return True
        assigned = self._assignment.latest
        return assigned >= 0 and assigned >= start - self._lead
