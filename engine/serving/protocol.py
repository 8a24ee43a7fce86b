"""The wire protocol between the gateway and an engine instance, version 2 (HTTP/1.1 + msgspec).

The same protocol serves the engine the gateway supervises on loopback and a remote engine
in a pool, so either drops in behind ``EngineClient``. Connections are kept alive and reused.

    gateway                                   engine instance
    POST /engine/v1/generate  GenerateRequest (JSON) ──▶
                              ◀── 200, FRAMES_MEDIA_TYPE, chunked: a stream of frames
                                  DeltaFrame ... DeltaFrame(every index finished) | ErrorEvent
                              ◀── 4xx/5xx, ErrorEvent (JSON; rejected before the first token)
    POST /engine/v1/tokens    GenerateRequest (JSON) ──▶ ◀── TokenCount (JSON; nothing runs)
    POST /engine/v1/embed     EmbedRequest (JSON) ──▶ ◀── EmbedResult (JSON: every vector at once)
    POST /engine/v1/embed/tokens EmbedRequest (JSON) ──▶ ◀── TokenCount (JSON; nothing runs)
    GET  /engine/v1/info      ◀── EngineInfo (JSON: instance id, models, pool stats)
    GET  /engine/v1/health    ◀── 200 once every model is loaded, 503 before
    GET  /engine/v1/link      WebSocket upgrade: the link, every generation of one gateway worker
                              LinkOpen | LinkCount | LinkAbort (msgpack) ──▶
                              ◀── [[stream, DeltaFrame | ErrorEvent | Counted], ...] per step

A generation streams binary frames, each a 4-byte big-endian length and that many bytes of
msgpack, independent of the HTTP chunk boundaries::

    ┌──────────────┬────────────────────────────────────────────┐
    │ length: u32  │ msgpack: [DeltaEvent, ...] | ErrorEvent    │  ...next frame
    └──────────────┴────────────────────────────────────────────┘

A frame (``DeltaFrame``) carries everything one engine step produced for one request: at most
one ``DeltaEvent`` per completion index, holding every token that step gave that completion. A
reader that falls behind gets the steps it missed coalesced into its next frame, so the cost of
the link is per frame, never per token. The engine encodes its own ``StreamDelta`` structs
straight into frames; ``DeltaEvent`` has the same fields (a test holds them equal).

Version 1 streamed one NDJSON line per token; a gateway meeting a version-1 engine (any other
media type on generate) reports the engine unavailable instead of misreading it.

The gateway streams over the link, not over ``/engine/v1/generate`` (which stays for direct
callers: ``strongroom bench gateway``'s peer, curl). One WebSocket per gateway worker and engine
carries every generation of that worker, each under a stream id the gateway chose; the engine
writes one binary message per step holding every stream's frame of that step::

    gateway ──▶ LinkOpen(stream=7, request)   LinkAbort(stream=7)          (one message each)
    engine  ──▶ [[7, DeltaFrame], [9, DeltaFrame], [4, ErrorEvent], ...]  (one message per step)

A token count (``LinkCount``, what ``POST /engine/v1/tokens`` answers) is a stream of one frame,
``Counted`` or ``ErrorEvent``, so a request costs the engine no HTTP call at all.

A stream ends when every completion finished or with its ``ErrorEvent``; a LinkAbort ends it
early (its late frames are dropped). The link closing ends every stream on it: the engine
aborts them all, the gateway fails them all at once. The engine side is
``engine.serving.link_session``, the gateway side ``engine.serving.engine_link``.

Closing the response stream (or the link) aborts the request in the engine and frees its KV blocks.
Every call carries ``Authorization: Bearer <engine token>``; the engine compares it in
constant time so no other local process can reach a model without passing the gateway.
Health and info never wait for a step or for a generation's slot: a busy engine still answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.core.sampling_params import SamplingParams

__all__ = [
    "FRAMES_MEDIA_TYPE",
    "LINK_PATH",
    "PROTOCOL_VERSION",
    "ChatMessage",
    "Counted",
    "DeltaEvent",
    "DeltaFrame",
    "EmbedRequest",
    "EmbedResult",
    "EngineInfo",
    "ErrorEvent",
    "GenerateRequest",
    "KeyOperationEvent",
    "LinkAbort",
    "LinkCount",
    "LinkOpen",
    "LogprobEntry",
    "ModelCard",
    "TokenCount",
]

PROTOCOL_VERSION = 2
FRAMES_MEDIA_TYPE = "application/vnd.strongroom.engine-frames; version=2"
LINK_PATH = "/engine/v1/link"


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One chat turn as the template sees it; unset tool fields are left out, so a template that
    tests ``'tool_calls' in message`` sees them only on the turns that have them."""

    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    """An assistant's calls, as HF templates expect them:
    ``{"id", "type": "function", "function": {"name", "arguments": <object>}}``."""
    tool_call_id: str | None = None
    name: str | None = None

    def __repr__(self) -> str:
        return f"ChatMessage(role={self.role!r}, content=<{len(self.content)} chars>)"


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Exactly one of ``prompt``, ``prompt_token_ids`` or ``messages`` is set."""

    request_id: str
    model: str
    params: SamplingParams
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool definitions, rendered by the chat template (HF ``apply_chat_template(tools=)``)."""
    tenant: str | None = None
    """The caller's tenant; with ``subject``, salts the prefix cache (``engine.core.cache_scope``) so
    nobody can probe another's prompts by timing."""
    subject: str | None = None
    """The caller (the token's subject)."""
    priority: int = 0

    def __repr__(self) -> str:
        size = len(self.prompt or "") if self.prompt_token_ids is None else len(self.prompt_token_ids)
        return f"GenerateRequest(id={self.request_id!r}, model={self.model!r}, prompt_len={size})"


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Exactly one of ``input`` (texts) or ``input_token_ids`` is set, with at least one input."""

    request_id: str
    model: str
    input: list[str] | None = None
    input_token_ids: list[list[int]] | None = None
    dimensions: int | None = None
    """Keep this many leading values of each vector, re-normalised (Matryoshka models)."""

    @property
    def inputs(self) -> list[str] | list[list[int]]:
        if self.input_token_ids is not None:
            return self.input_token_ids
        return self.input or []

    def __repr__(self) -> str:
        return f"EmbedRequest(id={self.request_id!r}, model={self.model!r}, inputs={len(self.inputs)})"


class EmbedResult(msgspec.Struct, frozen=True, kw_only=True):
    embeddings: list[list[float]]
    """One unit-norm vector per input, in input order (float32 values)."""
    num_prompt_tokens: int


class LogprobEntry(msgspec.Struct, frozen=True, kw_only=True):
    token_id: int
    token: str
    logprob: float
    top: list[tuple[str, float]] = []
    bytes: list[int] = []
    """The token's own bytes (a token may end inside a UTF-8 character)."""
    top_bytes: list[list[int]] = []


class DeltaEvent(msgspec.Struct, frozen=True, kw_only=True, tag="delta"):
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    logprobs: list[LogprobEntry] | None = None


class ErrorEvent(msgspec.Struct, frozen=True, kw_only=True, tag="error"):
    code: str
    message: str
    param: str | None = None


DeltaFrame = list[DeltaEvent]
"""What one engine step (or several, coalesced for a reader that fell behind) produced for one
request: at most one event per completion index, in index order."""


class LinkOpen(msgspec.Struct, frozen=True, kw_only=True, tag="open"):
    """Start ``request`` as stream ``stream`` of this link (an id not open on it now)."""

    stream: int
    request: GenerateRequest


class LinkCount(msgspec.Struct, frozen=True, kw_only=True, tag="count"):
    """Count ``request``'s prompt tokens as ``generate`` would; stream ``stream`` answers with one
    ``Counted`` or ``ErrorEvent``. Nothing is queued."""

    stream: int
    request: GenerateRequest


class Counted(msgspec.Struct, frozen=True, kw_only=True, tag="counted"):
    """The answer to a ``LinkCount``."""

    num_tokens: int


class LinkAbort(msgspec.Struct, frozen=True, kw_only=True, tag="abort"):
    """The gateway no longer wants stream ``stream``: abort its generation, send nothing more."""

    stream: int


class TokenCount(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /engine/v1/tokens``: the prompt tokens a GenerateRequest would have, counted by the
    model's own chat template and tokenizer (the gateway reserves quota with it)."""

    num_tokens: int


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    max_model_len: int
    has_chat_template: bool
    dtype: str = ""
    tool_syntax: str = ""
    """How the chat template writes tool calls (``engine.text.tool_syntax``); empty: no tools."""
    quantization: str | None = None
    """The weight quantization ("fp8", "int8", "fp8-block128x128"); None for unquantized weights."""
    kv_cache_dtype: str = ""
    """What the KV cache stores keys and values as ("bfloat16", "float8_e4m3fn"); empty: unknown."""
    kind: str = "chat"
    """"chat" (chat and completions) or "embedding" (embeddings only)."""
    embedding_size: int = 0
    """An embedding model's full vector length; 0 for chat models."""
    manifest_sha256: str = ""
    """Hash of the sealed model's signed manifest; empty for plaintext models."""

    @property
    def audit_manifest(self) -> str:
        """What the audit record names as the model served: the sealed manifest's hash, then the
        quantization of its weights and of its KV cache when there is one ("<sha256>
        weights=fp8-block128x128 kv=fp8"); empty for a plaintext model served as stored."""
        parts = [self.manifest_sha256] if self.manifest_sha256 else []
        if self.quantization:
            parts.append(f"weights={self.quantization}")
        if self.kv_cache_dtype.startswith("float8"):
            parts.append("kv=fp8")
        return " ".join(parts)


class KeyOperationEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A key operation this instance carried out while opening its models (a sealed model's data
    key unwrapped, or refused): key id and version, never key material. The engine keeps them for
    ``EngineInfo``; the gateway's engine pool writes each once into its audit log."""

    operation: str
    """What was done with the key ("unwrap")."""
    key_id: str
    key_version: int
    model: str
    process: str
    """Which engine process did it ("engine pid 4711")."""
    provider: str
    """The key provider's kind ("file", "pkcs11")."""
    error: str = ""
    """Why the operation failed; empty when it succeeded."""


class EngineInfo(msgspec.Struct, frozen=True, kw_only=True):
    instance_id: str
    models: list[ModelCard]
    failed_models: dict[str, str] = {}
    """Models that could not be loaded, with the reason (they are out of service)."""
    stats: dict[str, float] = {}
    key_operations: list[KeyOperationEvent] = []
    """Key operations (model unseals) of this instance since it started, for the gateway to record."""
