"""A checkpoint's tokenizer: ``tokenizer.json`` plus the special tokens and chat template around it."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from engine.errors import InvalidRequestError, ModelLoadError
from engine.loading.checkpoint import Checkpoint
from engine.text.chat_template import ChatTemplate
from engine.text.special_token_escape import Literal, SpecialTokenEscape
from engine.text.token_bytes import TokenBytes

__all__ = ["Tokenizer"]


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """Encode, decode, and the chat template, as Hugging Face ``AutoTokenizer`` does them."""

    def __init__(
        self,
        tokenizer: HFTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: ChatTemplate | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.chat_template = chat_template
        self.bos_token_id = tokenizer.token_to_id(bos_token) if bos_token else None
        self.eos_token_id = tokenizer.token_to_id(eos_token) if eos_token else None
        specials = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special]
        self._escape = SpecialTokenEscape([*specials, bos_token or "", eos_token or ""])

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Tokenizer:
        if not ckpt.has("tokenizer.json"):
            raise ModelLoadError(f"{ckpt.name}: missing file tokenizer.json")
        try:
            tokenizer = HFTokenizer.from_str(ckpt.text("tokenizer.json"))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ModelLoadError(f"{ckpt.name}: tokenizer.json does not load: {exc}") from exc
        config = ckpt.optional_json("tokenizer_config.json")
        bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
        source = _template_source(ckpt, config)
        template = None
        if source is not None:
            specials = {
                k: t
                for k in ("bos_token", "eos_token", "unk_token", "pad_token")
                if (t := _token_text(config.get(k)))
            }
            template = ChatTemplate(source, special_tokens=specials, origin=ckpt.name)
        return cls(tokenizer, bos_token=bos, eos_token=eos, chat_template=template)

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        # A rendered chat template already starts with BOS; adding another one changes the output.
        if add_special_tokens and self.bos_token and text.startswith(self.bos_token):
            add_special_tokens = False
        return _encode(self._tokenizer, text, add_special_tokens)

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        *,
        add_special_tokens: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """The chat template with the generation prompt, as token ids; special-token strings
        inside the messages and the tool definitions are encoded as plain text
        (``engine.text.special_token_escape``)."""
        if self.chat_template is None:
            raise InvalidRequestError("this model has no chat template", param="messages")
        # The tools ride as a leading pseudo-message so one escape (one marker pair) covers both.
        escaped = self._escape.escape([{"tools": tools or []}, *messages])
        rendered = self.chat_template.render(
            escaped.messages[1:], add_generation_prompt=True, tools=escaped.messages[0]["tools"] or None
        )
        ids: list[int] = []
        for i, piece in enumerate(SpecialTokenEscape.split(rendered, escaped)):
            if isinstance(piece, Literal):
                ids += _encode(self._plain_text, piece.text, False)
            else:
                ids += self.encode(piece, add_special_tokens=add_special_tokens and i == 0)
        return ids

    @cached_property
    def _plain_text(self) -> HFTokenizer:
        """A copy that reads special-token strings as ordinary text (built on first need)."""
        plain = HFTokenizer.from_str(self._tokenizer.to_str())
        plain.encode_special_tokens = True
        return plain

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return str(self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens))

    def id_to_token(self, token_id: int) -> str:
        return self._tokenizer.id_to_token(token_id) or ""

    @cached_property
    def token_bytes(self) -> TokenBytes:
        """Each token's own bytes (logprob ``bytes``), built on first need."""
        return TokenBytes(self._tokenizer)

    @property
    def hf(self) -> HFTokenizer:
        """The underlying ``tokenizers.Tokenizer`` (for the incremental detokenizer)."""
        return self._tokenizer

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, chat_template={self.chat_template is not None})"


def _template_source(ckpt: Checkpoint, config: dict[str, Any]) -> str | None:
    if ckpt.has("chat_template.jinja"):
        return ckpt.text("chat_template.jinja")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: HF picks "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


GIL_FREE_CHARS = 8192
"""Texts longer than this are encoded through ``encode_batch``, which releases the GIL while it
works (``encode`` holds it: a 1 MB prompt held it for ~0.9 s, so the engine server's event loop,
and its health answers, stalled even with the encoding in a worker thread)."""


def _encode(tokenizer: HFTokenizer, text: str, add_special_tokens: bool) -> list[int]:
    if len(text) > GIL_FREE_CHARS:
        return list(tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids)
    return list(tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)
