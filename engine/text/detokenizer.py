"""Token ids in, text deltas out, never splitting a multi-byte character.

A token can end in the middle of a UTF-8 character (byte-level BPE splits 中 = e4 b8 ad across
tokens; sentencepiece byte fallback emits <0xE4><0xB8><0xAD>), and a token's text can depend on its
left neighbour (metaspace drops the leading space of the first token it decodes). So each step
decodes a short window twice, with and without the newest tokens, and emits the difference::

    ids:   ... | prefix_offset ........ read_offset ........ len(ids)
                 └ already emitted ┘     └ pending, new ┘
    delta = decode(ids[prefix_offset:])[len(decode(ids[prefix_offset:read_offset])):]

A delta that ends in U+FFFD is an incomplete character: nothing is emitted and the window grows
until the character completes. Invariant: the concatenation of all deltas (plus ``flush()``) is
``tokenizer.decode(output_ids)``; given prompt ids, the first tokens are decoded after the last few
prompt tokens, so a leading space is kept as it is in ``decode(prompt + output)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"
# Prompt tokens decoded as left context; enough for every tokenizer's merge of spaces/prefixes.
_NUM_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Streams one sequence's output text; one instance per sequence."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        prompt_token_ids: Sequence[int] = (),
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids[-_NUM_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._num_emitted_chars = 0

    def __repr__(self) -> str:
        return f"IncrementalDetokenizer(num_emitted_chars={self._num_emitted_chars})"

    @property
    def num_emitted_chars(self) -> int:
        return self._num_emitted_chars

    def push(self, token_id: int) -> str:
        """Add one generated token; return the text it completes (possibly empty)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) <= len(prefix_text) or new_text.endswith(_REPLACEMENT):
            return ""
        delta = new_text[len(prefix_text) :]
        # Ids left of the new prefix are never decoded again; dropping them keeps each step O(window).
        del self._ids[: self._read_offset]
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._num_emitted_chars += len(delta)
        return delta

    def push_many(self, token_ids: Sequence[int]) -> str:
        return "".join(self.push(token_id) for token_id in token_ids)

    def push_final(self, token_ids: Sequence[int]) -> str:
        """``push_many(token_ids) + flush()`` in two decodes instead of two per token, for a
        sequence whose text is read only when it ends: the decode of the window and token_ids
        after what was emitted. The same text as pushing one at a time, except for bytes that are
        not valid UTF-8 under a byte-fallback decoder, which replaces a whole run of byte tokens
        at once: there the count of U+FFFD may differ, and this is the tokenizer's own decode."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode([*self._ids[self._prefix_offset :], *token_ids])
        delta = new_text[len(prefix_text) :]
        self._ids = []
        self._prefix_offset = self._read_offset = 0
        self._num_emitted_chars += len(delta)
        return delta

    def flush(self) -> str:
        """Text still held back at the end of the sequence, incomplete characters as U+FFFD."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        delta = new_text[len(prefix_text) :]
        del self._ids[: self._read_offset]
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._num_emitted_chars += len(delta)
        return delta

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)
