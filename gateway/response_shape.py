"""What an OpenAI answer looks like, decided once from the request: the builder and the SSE writer
read only this, never the request, the lease or the engine client behind it."""

from __future__ import annotations

import msgspec

__all__ = ["ResponseShape"]


class ResponseShape(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a request that shape its answer's JSON (chat or completion objects)."""

    is_chat: bool
    """``chat.completion`` objects (messages, deltas) rather than ``text_completion`` ones."""
    model: str
    """The model name the answer echoes: the one the client asked for."""
    num_choices: int = 1
    """``n``: a chat stream opens with one role delta per choice."""
    wants_logprobs: bool = False
    """Token logprobs were asked for, so each choice carries them (where the text is unchanged)."""

    def __post_init__(self) -> None:
        if self.num_choices < 1:
            raise ValueError("a response has at least one choice")

    @property
    def id_prefix(self) -> str:
        return "chatcmpl-" if self.is_chat else "cmpl-"
