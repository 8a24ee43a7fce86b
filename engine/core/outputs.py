"""What the engine hands back: stream deltas, finished completions, and model descriptions."""

from __future__ import annotations

import msgspec

__all__ = ["CompletionOutput", "ModelInfo", "RequestOutput", "StreamDelta", "TokenLogprob"]


class TokenLogprob(msgspec.Struct, frozen=True, kw_only=True):
    """One generated token's logprob and the top alternatives (token text, logprob)."""

    token_id: int
    token: str
    logprob: float
    top: list[tuple[str, float]] = []
    bytes: list[int] = []
    """The token's own bytes from the vocabulary (``engine.text.token_bytes``), not its text's."""
    top_bytes: list[list[int]] = []
    """The same for each of ``top``, in order."""


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True):
    """New output of one completion (``index`` among the request's n) since the last delta."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    """None while running; "stop", "length" or "abort" on the last delta."""
    num_prompt_tokens: int
    num_output_tokens: int
    logprobs: list[TokenLogprob] | None = None

    def __repr__(self) -> str:
        return (
            f"StreamDelta(index={self.index}, text_len={len(self.text)}, tokens={len(self.token_ids)}, "
            f"finish_reason={self.finish_reason!r})"
        )


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    max_model_len: int
    vocab_size: int
    has_chat_template: bool
    dtype: str
    tool_syntax: str = ""
    """How the chat template writes tool calls (``engine.text.tool_syntax``); empty: no tools."""
    quantization: str | None = None
    """The linear layers' weight quantization ("fp8", "int8", "fp8-block128x128"), None if none."""
    kv_cache_dtype: str = ""
    """What the KV cache stores keys and values as ("bfloat16", "float8_e4m3fn"); empty: unknown."""
    kind: str = "chat"
    """"chat" or "embedding"."""
    embedding_size: int = 0
    """An embedding model's vector length (its hidden size); 0 for chat models."""


class EmbeddingOutput(msgspec.Struct, frozen=True, kw_only=True):
    """One embedding request's vectors, in input order, and the tokens they took."""

    embeddings: list[list[float]]
    num_prompt_tokens: int


class CompletionOutput(msgspec.Struct, kw_only=True):
    """One finished completion of the offline ``LLM`` API."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None

    def __repr__(self) -> str:
        return f"CompletionOutput(index={self.index}, tokens={len(self.token_ids)}, finish_reason={self.finish_reason!r})"


class RequestOutput(msgspec.Struct, kw_only=True):
    """All completions of one prompt; ``text`` and friends are those of the first."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    def __repr__(self) -> str:
        return f"RequestOutput(request_id={self.request_id!r}, prompt_len={len(self.prompt_token_ids)}, n={len(self.outputs)})"
