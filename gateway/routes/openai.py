"""The OpenAI-compatible endpoints. Thin: parse HTTP, call the inference service, answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import msgspec
from litestar import Request, Response, get, post
from litestar.exceptions import ClientException

from gateway.batch_stream import open_batch
from gateway.embedding_types import EmbeddingRequest
from gateway.errors import BadRequestError, ClientDisconnectedError, ModelNotFoundError, PayloadTooLargeError
from gateway.model_catalog import visible_models
from gateway.openai_types import ChatCompletionRequest, Completion, CompletionRequest, ModelList, ModelObject
from gateway.prompt_batch import merge_batch, split_batch
from gateway.request_context import RequestContext, request_context
from gateway.services import Services
from gateway.sse import server_sent_events
from gateway.sse_stream import SseStream

__all__ = ["OPENAI_ROUTES", "context_of"]

_JSON = "application/json"
_T = TypeVar("_T")


def context_of(request: Request[Any, Any, Any], endpoint: str) -> RequestContext:
    return request_context(request.scope, endpoint)  # type: ignore[arg-type]


async def _read_body(request: Request[Any, Any, Any]) -> bytes:
    try:
        return await request.body()
    except ClientException as exc:
        if exc.status_code == 413:
            raise PayloadTooLargeError("The request body is too large") from None
        raise


def _parse(raw: bytes, type_: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        if "got `float`" in str(exc):
            # JSON has one number type: 2.0 is an integer to JSON Schema (and to OpenAI), not to
            # msgspec. Only a body that failed pays for the second pass.
            try:
                return msgspec.convert(_integral(msgspec.json.decode(raw)), type_)
            except msgspec.ValidationError as again:
                exc = again
        raise BadRequestError(f"Invalid request: {exc}", param=_param_of(str(exc))) from None
    except msgspec.DecodeError:
        raise BadRequestError("The request body is not valid JSON") from None
    except RecursionError:
        # msgspec's nesting limit; an error of the input, not of the server.
        raise BadRequestError("The request body is nested too deeply") from None


def _integral(value: Any) -> Any:
    """``value`` with every float that is a whole number turned into an int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


def _param_of(message: str) -> str | None:
    if "unknown field `" in message:  # bodies that forbid unknown fields name the field
        return message.split("unknown field `", 1)[1].split("`", 1)[0]
    _, _, path = message.partition("at `$.")
    return path.rstrip("`").split(".")[0].split("[")[0] or None if path else None


async def _infer(
    request: Request[Any, Any, Any], services: Services, kind: str, type_: type[Any]
) -> Response[Any]:
    endpoint = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    ctx = context_of(request, endpoint)
    inference = services.inference
    await services.authenticator.caller(ctx, request.headers.get("authorization"))
    try:
        body = _parse(await _read_body(request), type_)
    except (BadRequestError, PayloadTooLargeError) as exc:
        raise await inference.reject(ctx, exc) from None
    try:
        batch = split_batch(body) if isinstance(body, CompletionRequest) else None
    except BadRequestError as exc:
        raise await inference.reject(ctx, exc) from None
    if batch is not None and body.is_stream:
        streams, headers = await open_batch(inference, ctx, batch)
        headers["cache-control"] = "no-cache"
        return SseStream(server_sent_events(streams), headers=headers)
    if batch is not None:
        answers: list[Completion] = []
        for part in batch:
            prep = await inference.prepare(ctx, kind, part)
            answers.append(cast(Completion, await _unless_client_leaves(request, inference.complete(prep))))
        merged = merge_batch(answers, body.num_choices)
        return Response(msgspec.json.encode(merged), media_type=_JSON, headers=prep.headers)
    prep = await inference.prepare(ctx, kind, body)
    headers = prep.headers
    if body.is_stream:
        headers["cache-control"] = "no-cache"
        events = server_sent_events(await inference.open_stream(prep))
        return SseStream(events, headers=headers)
    answer = await _unless_client_leaves(request, inference.complete(prep))
    return Response(msgspec.json.encode(answer), media_type=_JSON, headers=headers)


async def _unless_client_leaves(request: Request[Any, Any, Any], work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work``; if the client disconnects first, cancel it so the engine stops generating."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task not in done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnectedError("the client disconnected")
    return task.result()


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


@post("/v1/embeddings", status_code=200)
async def embeddings(request: Request[Any, Any, Any], services: Services) -> Response[Any]:
    ctx = context_of(request, "/v1/embeddings")
    await services.authenticator.caller(ctx, request.headers.get("authorization"))
    try:
        body = _parse(await _read_body(request), EmbeddingRequest)
    except (BadRequestError, PayloadTooLargeError) as exc:
        raise await services.inference.reject(ctx, exc) from None
    answer, headers = await _unless_client_leaves(request, services.embeddings.embed(ctx, body))
    return Response(msgspec.json.encode(answer), media_type=_JSON, headers=headers)


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any], services: Services) -> Response[Any]:
    return await _infer(request, services, "chat", ChatCompletionRequest)


@post("/v1/completions", status_code=200)
async def completions(request: Request[Any, Any, Any], services: Services) -> Response[Any]:
    return await _infer(request, services, "completions", CompletionRequest)


async def _visible_models(
    request: Request[Any, Any, Any], services: Services, endpoint: str
) -> dict[str, ModelObject]:
    ctx = context_of(request, endpoint)
    principal = await services.authenticator.caller(ctx, request.headers.get("authorization"))
    return await visible_models(principal, services.engines, services.authorizer)


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any], services: Services) -> Response[bytes]:
    models = await _visible_models(request, services, "/v1/models")
    return Response(msgspec.json.encode(ModelList(data=list(models.values()))), media_type=_JSON)


@get("/v1/models/{model_id:path}")
async def get_model(request: Request[Any, Any, Any], services: Services, model_id: str) -> Response[bytes]:
    models = await _visible_models(request, services, "/v1/models")
    # A model the caller may not use reads as absent, so names cannot be enumerated.
    model = models.get(model_id.lstrip("/"))
    if model is None:
        raise ModelNotFoundError(f"The model '{model_id.lstrip('/')}' does not exist", param="model")
    return Response(msgspec.json.encode(model), media_type=_JSON)


OPENAI_ROUTES = [chat_completions, completions, embeddings, list_models, get_model]
