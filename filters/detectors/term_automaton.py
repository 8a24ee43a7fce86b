"""An Aho-Corasick automaton over keyword skeletons that a stream steps one character at a time.

``ahocorasick_rs`` finds the matches of a whole text fast but keeps no state between calls; a
stream needs the state itself. After each character the state says how long the longest
suffix of the skeleton read so far is that begins some term (``depth``), which is exactly how
far back a match could still start, and the shortest term that ends here (``shortest_out``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

__all__ = ["TermAutomaton"]


class TermAutomaton:
    __slots__ = ("depth", "fail", "first", "goto", "longest", "shortest_out")

    def __init__(self, terms: Sequence[str]) -> None:
        goto: list[dict[str, int]] = [{}]
        depth = [0]
        out = [0]
        for term in terms:
            state = 0
            for ch in term:
                nxt = goto[state].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[state][ch] = nxt
                    goto.append({})
                    depth.append(depth[state] + 1)
                    out.append(0)
                state = nxt
            out[state] = len(term)
        fail = [0] * len(goto)
        queue = deque(goto[0].values())
        while queue:
            state = queue.popleft()
            for ch, child in goto[state].items():
                queue.append(child)
                f = fail[state]
                while f and ch not in goto[f]:
                    f = fail[f]
                target = goto[f].get(ch, 0)
                fail[child] = target if target != child else 0
                # A shorter term ending here comes through the failure link (a shorter suffix).
                if out[fail[child]]:
                    out[child] = out[fail[child]]
        self.goto = goto
        """Per state: the next state for each character that continues some term."""
        self.fail = fail
        """Per state: the state of the longest proper suffix that begins some term."""
        self.depth = depth
        """Per state: characters of the longest suffix read that begins some term."""
        self.shortest_out = out
        """Per state: length of the shortest term ending here, 0 if none."""
        self.longest = max((len(t) for t in terms), default=1)
        firsts = "".join(sorted(goto[0]))
        self.first = re.compile(f"[{re.escape(firsts)}]" if firsts else "(?!)")
        """Any character some term starts with."""

    def __repr__(self) -> str:
        return f"TermAutomaton(num_states={len(self.goto)})"

    def step(self, state: int, ch: str) -> int:
        goto, fail = self.goto, self.fail
        while state and ch not in goto[state]:
            state = fail[state]
        return goto[state].get(ch, 0)
