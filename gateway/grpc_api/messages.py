"""The proto messages of ``inference.proto`` to and from the OpenAI types the pipeline speaks.

A request becomes the OpenAI body the HTTP route would have parsed (then the same checks run on
it), through the proto's JSON mapping: the field names are OpenAI's, so only the few shapes
proto cannot say alike are rewritten (``tool_choice``, ``stream_options``, a completion's
``prompt``, token-id inputs). An answer goes back the same way, typed answer -> builtins -> proto.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.embedding_types import EmbeddingList, EmbeddingRequest
from gateway.errors import BadRequestError
from gateway.grpc_api import inference_pb2 as pb
from gateway.openai_types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatLogprobs,
    Completion,
    CompletionChunk,
    CompletionRequest,
    ModelObject,
    Usage,
)

__all__ = [
    "chat_request",
    "completion_request",
    "embedding_list",
    "embedding_request",
    "mapped",
    "model_list",
    "proto_of",
]

_T = TypeVar("_T")
_M = TypeVar("_M", bound=Message)


def _fields(message: Message) -> dict[str, Any]:
    # Proto3 ``optional`` fields appear only when set: unset is OpenAI's null / absent.
    fields: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return fields


def _body(raw: dict[str, Any], type_: type[_T]) -> _T:
    try:
        # Not strict: the JSON mapping writes int64 (seed) as a string.
        return msgspec.convert(raw, type_, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if "missing required field `" in message:
            param: str | None = message.split("missing required field `", 1)[1].split("`", 1)[0]
        else:
            _, _, path = message.partition("at `$.")
            param = path.rstrip("`").split(".")[0].split("[")[0] or None
        raise BadRequestError(f"Invalid request: {exc}", param=param) from None


def _sampling(raw: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    if raw.pop("include_usage", False):
        raw["stream_options"] = {"include_usage": True}
    raw["stream"] = stream
    return raw


def chat_request(message: pb.ChatCompletionRequest, *, stream: bool) -> ChatCompletionRequest:
    raw = _sampling(_fields(message), stream=stream)
    # Proto3 cannot tell an empty list from none: the pipeline's own check names the field.
    raw.setdefault("messages", [])
    choice = raw.pop("tool_choice", None)
    if choice:
        name = choice.get("function_name")
        raw["tool_choice"] = {"type": "function", "function": {"name": name}} if name else choice.get("mode")
    return _body(raw, ChatCompletionRequest)


def completion_request(message: pb.CompletionRequest, *, stream: bool) -> CompletionRequest:
    raw = _sampling(_fields(message), stream=stream)
    if "text" in raw:
        raw["prompt"] = raw.pop("text")
    elif "token_ids" in raw:
        raw["prompt"] = raw.pop("token_ids").get("ids", [])
    return _body(raw, CompletionRequest)


def embedding_request(message: pb.EmbeddingRequest) -> EmbeddingRequest:
    raw = _fields(message)
    texts, token_ids = raw.pop("input", []), raw.pop("input_token_ids", [])
    if texts and token_ids:
        raise BadRequestError("give input or input_token_ids, not both", param="input")
    raw["input"] = texts or [item.get("ids", []) for item in token_ids]
    raw["encoding_format"] = "float"
    return _body(raw, EmbeddingRequest)


def proto_of(answer: ChatCompletion | Completion | ChatCompletionChunk | CompletionChunk, into: _M) -> _M:
    """``answer`` as the proto message ``into`` (a fresh ``ChatCompletion``, ``CompletionChunk``…).

    Chunks, one per token or so, are built field by field (``_chat_chunk``, ``_completion_chunk``):
    the JSON mapping costs about a hundred times the SSE encoding per chunk. Whole answers, one
    per request, take the mapping, which follows the proto's field names by itself; a unit test
    holds both ways equal."""
    if isinstance(answer, ChatCompletionChunk) and isinstance(into, pb.ChatCompletionChunk):
        _chat_chunk(answer, into)
        return into
    if isinstance(answer, CompletionChunk) and isinstance(into, pb.CompletionChunk):
        _completion_chunk(answer, into)
        return into
    return mapped(answer, into)


def mapped(answer: ChatCompletion | Completion | ChatCompletionChunk | CompletionChunk, into: _M) -> _M:
    """``answer`` as ``into`` through the proto's JSON mapping (any answer type)."""
    raw = msgspec.to_builtins(answer)
    for choice in raw.get("choices", ()):
        logprobs = choice.get("logprobs")
        if logprobs and "top_logprobs" in logprobs and "tokens" in logprobs:
            # A completion's per-token {token: logprob} maps: proto repeats a message holding a map.
            logprobs["top_logprobs"] = [{"top": top} for top in logprobs["top_logprobs"]]
    json_format.ParseDict(raw, into, ignore_unknown_fields=True)
    return into


def embedding_list(answer: EmbeddingList) -> pb.EmbeddingList:
    out = pb.EmbeddingList()
    json_format.ParseDict(msgspec.to_builtins(answer), out)
    return out


def model_list(models: list[ModelObject]) -> pb.ModelList:
    out = pb.ModelList()
    json_format.ParseDict({"data": msgspec.to_builtins(models), "object": "list"}, out)
    return out


def _usage(usage: Usage, into: pb.Usage) -> None:
    into.prompt_tokens = usage.prompt_tokens
    into.completion_tokens = usage.completion_tokens
    into.total_tokens = usage.total_tokens


def _chat_logprobs(logprobs: ChatLogprobs, into: pb.ChatLogprobs) -> None:
    for entry in logprobs.content:
        token = into.content.add(token=entry.token, logprob=entry.logprob, bytes=entry.bytes or ())
        for top in entry.top_logprobs:
            token.top_logprobs.add(token=top.token, logprob=top.logprob, bytes=top.bytes or ())


def _chat_chunk(chunk: ChatCompletionChunk, into: pb.ChatCompletionChunk) -> None:
    into.id, into.object, into.created = chunk.id, chunk.object, chunk.created
    into.model, into.system_fingerprint = chunk.model, chunk.system_fingerprint
    for choice in chunk.choices:
        out = into.choices.add(index=choice.index)
        delta = choice.delta
        out.delta.SetInParent()
        if delta.role is not None:
            out.delta.role = delta.role
        if delta.content is not None:
            out.delta.content = delta.content
        for call in delta.tool_calls or ():
            piece = out.delta.tool_calls.add(index=call.index)
            if call.id is not None:
                piece.id = call.id
            if call.type is not None:
                piece.type = call.type
            piece.function.SetInParent()
            if call.function.name is not None:
                piece.function.name = call.function.name
            if call.function.arguments is not None:
                piece.function.arguments = call.function.arguments
        if choice.finish_reason is not None:
            out.finish_reason = choice.finish_reason
        if choice.logprobs is not None:
            _chat_logprobs(choice.logprobs, out.logprobs)
    if not isinstance(chunk.usage, msgspec.UnsetType):
        _usage(chunk.usage, into.usage)


def _completion_chunk(chunk: CompletionChunk, into: pb.CompletionChunk) -> None:
    into.id, into.object, into.created = chunk.id, chunk.object, chunk.created
    into.model, into.system_fingerprint = chunk.model, chunk.system_fingerprint
    for choice in chunk.choices:
        out = into.choices.add(index=choice.index, text=choice.text)
        if choice.finish_reason is not None:
            out.finish_reason = choice.finish_reason
        lp = choice.logprobs
        if lp is not None:
            out.logprobs.tokens.extend(lp.tokens)
            out.logprobs.token_logprobs.extend(lp.token_logprobs)
            out.logprobs.text_offset.extend(lp.text_offset)
            for top in lp.top_logprobs:
                out.logprobs.top_logprobs.add().top.update(top)
    if not isinstance(chunk.usage, msgspec.UnsetType):
        _usage(chunk.usage, into.usage)
