"""OpenAI-compatible request and response bodies (the subset the gateway serves).

Every create parameter of OpenAI's published spec is declared here and decided by
``gateway.request_support``: supported, accepted-and-ignored by design (documented there), or a
400 naming it. ``null`` is the default wherever the spec marks a field nullable. Fields the spec
does not know are ignored, as OpenAI's own server does; wrong types are 400s naming the field.
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
    "NamedToolChoice",
    "ResponseFormat",
    "ToolCall",
    "ToolCallDelta",
    "ToolDef",
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


class FunctionDef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """A JSON schema of the arguments object; None: no arguments."""
    strict: bool | None = None
    """Enforced whenever the call is forced (``required`` or a named function)."""


class ToolDef(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(msgspec.Struct, frozen=True, kw_only=True):
    name: str


class NamedToolChoice(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["function"]
    function: FunctionName


class FunctionDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A piece of a streamed call: the first carries ``id``, ``type`` and the name, the rest
    pieces of the arguments' JSON text, all under the call's ``index``."""

    index: int
    id: str | None = None
    type: str | None = None
    function: FunctionDelta = msgspec.field(default_factory=FunctionDelta)


class ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None
    refusal: str | None = None
    """An assistant message's ``refusal`` part carries its text here."""


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
            if part.type == "text" and part.text is not None:
                parts.append(part.text)
            elif part.type == "refusal" and part.refusal is not None:
                parts.append(part.refusal)
            else:
                raise msgspec.ValidationError(
                    f"content part type {part.type!r} is not supported - at `$.messages`"
                )
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
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    user: str | None = None
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None
    """Token id (as a string, JSON keys being strings) to a bias in [-100, 100]."""

    @property
    def is_stream(self) -> bool:
        return bool(self.stream)

    @property
    def num_choices(self) -> int:
        return 1 if self.n is None else self.n

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
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    # Decided by gateway.request_support (accepted by design, or a 400 naming the field):
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: Any = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    moderation: Any = None

    def __repr__(self) -> str:
        return f"ChatCompletionRequest(model={self.model!r}, messages={len(self.messages)})"


class CompletionRequest(_SamplingFields, frozen=True, kw_only=True):
    prompt: str | list[Any] | None = None
    """A string, a list of token ids, or a list of either (a batch: every prompt gets ``n``
    choices); msgspec allows one array type in a union, so the shape is checked by
    ``gateway.prompt_batch``. ``None`` is the empty prompt."""
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool | None = None
    best_of: int | None = None
    suffix: str | None = None

    def __repr__(self) -> str:
        return f"CompletionRequest(model={self.model!r})"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessageOut(msgspec.Struct, frozen=True, kw_only=True):
    role: str = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | msgspec.UnsetType = msgspec.UNSET
    """Left out unless the model called tools: the spec's ``tool_calls`` is not nullable."""
    refusal: str | None = None
    """Required by the spec (nullable): this gateway never answers with a model refusal."""


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
    refusal: list[TokenLogprobOut] | None = None


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
    system_fingerprint: str
    """The serving configuration the answer came from (``ResponseShape.system_fingerprint``)."""


class ChunkDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


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
    system_fingerprint: str
    usage: Usage | msgspec.UnsetType = msgspec.UNSET
    """Only on the last chunk, and only with ``stream_options.include_usage`` (else left out)."""


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
    system_fingerprint: str


class CompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    object: str = "text_completion"
    system_fingerprint: str
    usage: Usage | msgspec.UnsetType = msgspec.UNSET
    """Only on the last chunk, and only with ``stream_options.include_usage`` (else left out)."""


class ModelObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    created: int
    owned_by: str = "strongroom"
    object: str = "model"
    max_model_len: int | None = None
    quantization: str | None = None
    """The served weights' quantization ("fp8", "int8", ...); None: unquantized."""
    kv_cache_dtype: str | None = None
    """What the engine caches keys and values as ("bfloat16", "float8_e4m3fn"); None: not known."""
    kind: str = "chat"
    """"chat" (chat and completions) or "embedding" (``/v1/embeddings``); an extension field."""


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[ModelObject]
    object: str = "list"
