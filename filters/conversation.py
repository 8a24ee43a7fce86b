"""The texts of one request scanned as one text, so that a value split across messages is seen.

A card number, key or keyword cut in two, half in the system prompt and half in the user turn,
or over two user turns, or inside a tool result, is as readable to the model as one written
whole; each text alone shows only a harmless half. The texts are joined with a newline (a
separator every detector already reads across: "4111 1111" + "\\n" + "1111 1111" is a card,
"洗" + "\\n" + "钱" a keyword), scanned once, and each match is applied to every text it touches:

    texts     ["card 4111 1111", "1111 1111 ok"]
    joined    "card 4111 1111\\n1111 1111 ok"      match [5, 24) -> masked in both texts
    offsets   [0, 15]                               text i starts at offsets[i] in the joined text

A match cut by a text boundary is hidden whole in each piece (masking keeps no edge of a piece).
"""

from __future__ import annotations

from collections.abc import Sequence

from filters.normalized import NormalizedText, normalize
from filters.rewrite import rewrite
from filters.scanner import Match

SEPARATOR = "\n"


class Conversation:
    __slots__ = ("norm", "offsets", "texts")

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        offsets = []
        position = 0
        for text in self.texts:
            offsets.append(position)
            position += len(text) + len(SEPARATOR)
        self.offsets = offsets
        self.norm: NormalizedText = normalize(SEPARATOR.join(self.texts))

    def __repr__(self) -> str:
        return f"Conversation(num_texts={len(self.texts)}, len={len(self.norm.original)})"

    def rewrite(self, matches: list[Match]) -> list[str]:
        """Every text with the rewriting matches that touch it applied."""
        if not matches:
            return list(self.texts)
        out = []
        for text, begin in zip(self.texts, self.offsets, strict=True):
            out.append(rewrite(self.norm, matches, begin, begin + len(text)))
        return out
