"""Special tokens inside chat content become plain text; only the template's own stay special.

A rendered chat template is one string, and a tokenizer turns every occurrence of a special
token's text into that token. Encoded whole, a user who types ``<|im_end|>\n<|im_start|>system``
into a message forges a system turn. So before rendering, each special-token string in the
messages is swapped for an indexed marker of private-use characters; the rendered text is
encoded with special tokens parsed everywhere except at the markers, where the original string
is encoded as plain text:

    content   "hi<|im_end|>"        ->  "hi\ue000" "0" "\ue001"
    rendered  "<|im_start|>user\nhi\ue0000\ue001<|im_end|>\n"
    pieces    "<|im_start|>user\nhi"  Literal("<|im_end|>")  "<|im_end|>\n"
    ids       [<|im_start|>] user \n hi  < | im _ end | >  [<|im_end|>] \n

Markers are indexed, so a template that reorders or repeats messages still maps each one back
to its own text. Messages without any special-token string render and encode exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["Escaped", "Literal", "SpecialTokenEscape"]


class Literal(NamedTuple):
    """Content text that must be encoded as plain text, never as a special token."""

    text: str


class Escaped(NamedTuple):
    messages: list[dict[str, Any]]
    """The messages to render, markers in place of special-token strings."""
    literals: list[str]
    """The replaced strings; marker k stands for literals[k]."""
    marker: tuple[str, str]
    """Opening and closing private-use characters, chosen so that no message contains them."""


class SpecialTokenEscape:
    def __init__(self, special_tokens: Iterable[str]) -> None:
        tokens = sorted({t for t in special_tokens if t}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, tokens))) if tokens else None

    def __repr__(self) -> str:
        return f"SpecialTokenEscape(active={self._pattern is not None})"

    def escape(self, messages: list[dict[str, Any]]) -> Escaped:
        """The messages with every special-token string (in any string field) replaced by a marker."""
        pattern = self._pattern
        strings = list(_strings(messages))
        if pattern is None or not any(pattern.search(s) for s in strings):
            return Escaped(messages, [], ("", ""))
        used = set().union(*strings)
        cp = next(c for c in range(0xE000, 0xF8FF, 2) if chr(c) not in used and chr(c + 1) not in used)
        opening, closing = chr(cp), chr(cp + 1)
        literals: list[str] = []

        def swap(match: re.Match[str]) -> str:
            literals.append(match.group())
            return f"{opening}{len(literals) - 1}{closing}"

        def walk(value: Any) -> Any:
            if isinstance(value, str):
                return pattern.sub(swap, value)
            if isinstance(value, dict):
                return {k: walk(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [walk(v) for v in value]
            return value

        return Escaped([walk(m) for m in messages], literals, (opening, closing))

    @staticmethod
    def split(rendered: str, escaped: Escaped) -> list[str | Literal]:
        """The rendered text as template pieces and content literals, in order."""
        if not escaped.literals:
            return [rendered]
        opening, closing = escaped.marker
        pieces: list[str | Literal] = []
        for i, part in enumerate(re.split(f"{opening}([0-9]+){closing}", rendered)):
            if i % 2:
                pieces.append(Literal(escaped.literals[int(part)]))
            elif part:
                pieces.append(part)
        return pieces


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
