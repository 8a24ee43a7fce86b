"""OpenAI-compatible request and response bodies (the subset the gateway serves).

Unknown request fields are ignored, as OpenAI's own server does for fields it doesn't use;
wrong types are 400s naming the field.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessageIn",
    "Completion",
    "CompletionChunk",
    "CompletionRequest",
    "ModelList",
    "ModelObject",
    "ResponseFormat",
    "Usage",
]


class StreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool = False


class ToolFunction(msgspec.Struct, frozen=True, kw_only=True):
    name: str = ""
    arguments: str = ""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    type: str = "function"
    function: ToolFunction = msgspec.field(default_factory=ToolFunction)


class ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None


class ChatMessageIn(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if self.content is None:
            return ""
        parts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise msgspec.ValidationError(
                    f"content part type {part.type!r} is not supported - at `$.messages`"
                )
            parts.append(part.text)
        return "".join(parts)

    def __repr__(self) -> str:
        return f"ChatMessageIn(role={self.role!r}, content=<{len(self.text())} chars>)"


class JsonSchemaFormat(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    schema: dict[str, Any] | None = None
    """None: any JSON object."""
    strict: bool | None = None
    """Enforced either way: the engine decodes under the schema's grammar."""
    description: str | None = None


class ResponseFormat(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class _SamplingFields(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    user: str | None = None
    response_format: ResponseFormat | None = None

    @property
    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    messages: list[ChatMessageIn]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    def __repr__(self) -> str:
        return f"ChatCompletionRequest(model={self.model!r}, messages={len(self.messages)})"


class CompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    prompt: str | list[Any]
    """A string, a list of token ids, or a one-element list of either (msgspec allows one array type
    in a union, so the shape is checked by the inference service)."""
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False

    def __repr__(self) -> str:
        return f"CompletionRequest(model={self.model!r})"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessageOut(msgspec.Struct, frozen=True, kw_only=True):
    role: str = "assistant"
    content: str | None = None


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprobOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = []


class ChatLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    content: list[TokenLogprobOut]


class ChatChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    message: ChatMessageOut
    finish_reason: str | None
    logprobs: ChatLogprobs | None = None


class ChatCompletion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"
    system_fingerprint: str | None = None


class ChunkDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: ChunkDelta
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    object: str = "chat.completion.chunk"
    usage: Usage | None = None


class CompletionLogprobs(msgspec.Struct, frozen=True, kw_only=True):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    text: str
    finish_reason: str | None
    logprobs: CompletionLogprobs | None = None


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    object: str = "text_completion"


class CompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    object: str = "text_completion"
    usage: Usage | None = None


class ModelObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    owned_by: str = "strongroom"
    object: str = "model"
    max_model_len: int | None = None
    quantization: str | None = None
    """The served weights' quantization ("fp8", "int8", ...); None: unquantized."""


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[ModelObject]
    object: str = "list"
