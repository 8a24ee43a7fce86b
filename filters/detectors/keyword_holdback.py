"""How far a stream holds back for a keyword list: from where the longest unfinished term began.

The automaton (``TermAutomaton``) reads the skeleton of the new characters only; the normalized
position of each of the last few skeleton characters is kept, so its depth maps back to the
place a term could still start. A finished term stays held until a character that continues no
term arrives, which also brings the character that decides its word boundary.
"""

from __future__ import annotations

from collections import deque

from filters.detectors.term_automaton import TermAutomaton
from filters.holdback import Quiet

__all__ = ["KeywordHoldback"]


class KeywordHoldback:
    __slots__ = ("_automaton", "_last_hit_start", "_max_keep", "_positions", "_state")

    holds_forward = True
    """The longest suffix that begins a term starts no earlier after more text (a shorter
    prefix of a term is one too), so the hold point only moves forward."""

    def __init__(self, automaton: TermAutomaton, max_match_len: int) -> None:
        self._automaton = automaton
        self._max_keep = max_match_len - 1
        self._state = 0
        self._positions: deque[int] = deque(maxlen=automaton.longest)
        self._last_hit_start = -1

    def advance(self, text: str, base: int, begin: int) -> int:
        automaton = self._automaton
        goto, fail, shortest_out = automaton.goto, automaton.fail, automaton.shortest_out
        state, positions = self._state, self._positions
        i, end = begin - base, len(text)
        while i < end:
            if state == 0:  # at the root only a term's first character moves: jump to the next
                found = automaton.first.search(text, i)
                if found is None:
                    break
                i = found.start()
            ch = text[i]
            i += 1
            if not ch.isalnum():  # a separator: ``[\W_]`` is exactly "not alphanumeric"
                continue
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
            positions.append(base + i - 1)
            shortest = shortest_out[state]
            if shortest:
                self._last_hit_start = max(self._last_hit_start, positions[-shortest])
        self._state = state
        n = base + len(text)
        depth = automaton.depth[state]
        return max(positions[-depth] if depth else n, n - self._max_keep)

    @property
    def quiet(self) -> Quiet | None:
        """At the root, text without a term's first character leaves the root; but a list's
        first characters are most letters, so the stream would wake it nearly every delta."""
        return None

    def may_match(self, start: int) -> bool:
        return self._last_hit_start >= start
