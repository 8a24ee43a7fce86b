"""What an OpenAI answer looks like, decided once from the request: the builder and the SSE writer
read only this, never the request, the lease or the engine client behind it."""

from __future__ import annotations

import functools
import hashlib

import msgspec

__all__ = ["ResponseShape", "fingerprint_of"]


@functools.lru_cache(maxsize=256)  # one per model card; every request of a stream asks
def fingerprint_of(*parts: object) -> str:
    """OpenAI's ``fp_`` + a short hash: here of the model card that served the request."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return "fp_" + digest[:12]


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
    tool_syntax: str = ""
    """Read tool calls out of the text in this syntax (``gateway.tool_call_parser``); empty: don't."""
    max_tool_calls: int | None = None
    """Calls kept per choice (1 for ``parallel_tool_calls: false``); None: all."""
    echo: str = ""
    """The prompt text every choice starts with (a completion's ``echo``): the prompt as the
    request filters passed it."""
    system_fingerprint: str = "fp_strongroom"
    """Names the serving configuration (``fingerprint_of`` a model card): a client comparing two
    answers' fingerprints learns whether the model or its settings changed in between."""

    def __post_init__(self) -> None:
        if self.num_choices < 1:
            raise ValueError("a response has at least one choice")

    @property
    def id_prefix(self) -> str:
        return "chatcmpl-" if self.is_chat else "cmpl-"
