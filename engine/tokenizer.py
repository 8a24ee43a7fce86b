"""A checkpoint's tokenizer: ``tokenizer.json`` plus the special tokens and chat template around it."""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from engine.chat_template import ChatTemplate
from engine.checkpoint import Checkpoint
from engine.errors import ModelLoadError

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
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return str(self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens))

    def id_to_token(self, token_id: int) -> str:
        return self._tokenizer.id_to_token(token_id) or ""

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
