"""A token's own bytes, as OpenAI's logprob ``bytes`` report them.

A token can end in the middle of a UTF-8 character; its decoded text then holds U+FFFD and its
UTF-8 is not the token. Clients rebuild multi-byte characters by joining consecutive tokens'
bytes, so these come from the vocabulary itself:

- byte-level BPE (GPT-2, Llama 3, Qwen): each character of the vocabulary entry stands for one
  byte through GPT-2's printable byte alphabet;
- SentencePiece style (Llama 2, Mistral): ``<0xHH>`` byte-fallback pieces are that byte, ``▁``
  is a space, anything else its UTF-8;
- added tokens (special or not) are their text's UTF-8.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

__all__ = ["TokenBytes"]

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode``, inverted: printable stand-in character -> byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _uses_byte_level(component: Any) -> bool:
    if isinstance(component, dict):
        return component.get("type") == "ByteLevel" or any(_uses_byte_level(v) for v in component.values())
    if isinstance(component, list):
        return any(_uses_byte_level(v) for v in component)
    return False


class TokenBytes:
    """Token id -> its bytes, read off one tokenizer's vocabulary (memoised per id)."""

    def __init__(self, tokenizer: HFTokenizer) -> None:
        self._tokenizer = tokenizer
        spec = json.loads(tokenizer.to_str())
        self._alphabet = _byte_level_alphabet() if _uses_byte_level(spec.get("decoder")) else None
        self._added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
        self._cache: dict[int, list[int]] = {}

    def __call__(self, token_id: int) -> list[int]:
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._cache[token_id] = self._bytes_of(token_id)
        return cached

    def _bytes_of(self, token_id: int) -> list[int]:
        if token_id in self._added:
            return list(self._added[token_id].encode())
        piece = self._tokenizer.id_to_token(token_id) or ""
        if self._alphabet is not None and all(c in self._alphabet for c in piece):
            return [self._alphabet[c] for c in piece]
        if match := _BYTE_PIECE.fullmatch(piece):
            return [int(match.group(1), 16)]
        return list(piece.replace("▁", " ").encode())
