"""The engine instance's HTTP server: ``engine.serving.protocol`` over litestar.

One process hosts one ``EngineBackend`` (several models, one KV pool). The gateway, local or
remote, is its only client; every call must carry the engine token. Generations and token counts
reach it over each gateway worker's link (a WebSocket, ``engine.serving.link_session``); health,
info and embeddings are plain HTTP calls, so a probe never queues behind a link's frames. The HTTP
generate and token routes stay for direct callers (the benchmarks' peer, curl).
"""

from __future__ import annotations

import hmac
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
import msgspec
from litestar import Litestar, Request, Response, WebSocket, get, post, websocket
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.response import Stream
from litestar.status_codes import HTTP_200_OK

from engine.core.outputs import StreamDelta
from engine.errors import EngineError, InvalidRequestError, ModelLoadError, UnknownModelError
from engine.serving.backend import EngineBackend
from engine.serving.frames import encode_frame
from engine.serving.link_session import LinkSession
from engine.serving.protocol import (
    FRAMES_MEDIA_TYPE,
    LINK_PATH,
    EmbedRequest,
    EmbedResult,
    EngineInfo,
    ErrorEvent,
    GenerateRequest,
    KeyOperationEvent,
    ModelCard,
    TokenCount,
)

log = logging.getLogger("strongroom.engine")

_STATUS = {UnknownModelError: 404, InvalidRequestError: 400}
_encoder = msgspec.json.Encoder()
_Body = TypeVar("_Body", GenerateRequest, EmbedRequest)
_INLINE_COUNT_CHARS = 8_192
"""Prompts up to this long are counted on the loop (tens of microseconds); longer ones in a thread."""


def _status_of(exc: EngineError) -> int:
    for cls, status in _STATUS.items():
        if isinstance(exc, cls):
            return status
    return 503


def _error_event(exc: EngineError) -> ErrorEvent:
    return ErrorEvent(code=exc.code, message=exc.message, param=exc.param)


def _discard_finished(open_indices: set[int], batch: list[StreamDelta]) -> None:
    for delta in batch:
        if delta.finish_reason is not None:
            open_indices.discard(delta.index)


def _prompt_chars(req: GenerateRequest) -> int:
    if req.messages is not None:
        return sum(len(m.content) for m in req.messages)
    return len(req.prompt or "")


async def _decoded(request: Request[Any, Any, Any], type_: type[_Body]) -> _Body | Response[Any]:
    try:
        return msgspec.json.decode(await request.body(), type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        return Response(
            _encoder.encode(ErrorEvent(code="invalid_request", message=str(exc))), status_code=400
        )


def _error_response(exc: EngineError) -> Response[Any]:
    body = _error_event(exc)
    return Response(_encoder.encode(body), status_code=_status_of(exc), media_type="application/json")


class EngineServer:
    """Builds the litestar app around one backend."""

    def __init__(
        self,
        backend: EngineBackend,
        token: str,
        *,
        failed_models: dict[str, str] | None = None,
        key_operations: list[KeyOperationEvent] | None = None,
        manifests: dict[str, str] | None = None,
    ):
        """``manifests``: model name -> SHA-256 of its sealed manifest, carried into every record."""
        if not token:
            raise ValueError("the engine token must not be empty")
        self.backend = backend
        self.instance_id = f"engine-{uuid.uuid4().hex[:12]}"
        self._token = token.encode()
        self._failed = dict(failed_models or {})
        self._key_operations = key_operations if key_operations is not None else []
        self._manifests = dict(manifests or {})
        self._ready = False

    def _guard(self, connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        given = connection.headers.get("authorization", "").removeprefix("Bearer ").encode()
        if not hmac.compare_digest(given, self._token):
            raise NotAuthorizedException("invalid engine token")

    def info(self) -> EngineInfo:
        try:
            infos = self.backend.model_infos()
        except EngineError:
            infos = []  # the backend never started: its failures are in failed_models
        cards = [
            ModelCard(
                name=m.name,
                max_model_len=m.max_model_len,
                has_chat_template=m.has_chat_template,
                dtype=str(m.dtype),
                tool_syntax=m.tool_syntax,
                quantization=m.quantization,
                kv_cache_dtype=m.kv_cache_dtype,
                kind=m.kind,
                embedding_size=m.embedding_size,
                manifest_sha256=self._manifests.get(m.name, ""),
            )
            for m in infos
        ]
        try:
            raw_stats = self.backend.stats()
        except EngineError:
            raw_stats = {}
        stats = {k: float(v) for k, v in raw_stats.items() if isinstance(v, int | float)}
        return EngineInfo(
            instance_id=self.instance_id,
            models=cards,
            failed_models=self._failed,
            stats=stats,
            key_operations=list(self._key_operations),
        )

    async def _frames(
        self, req: GenerateRequest, first: list[StreamDelta], rest: AsyncIterator[list[StreamDelta]]
    ) -> AsyncIterator[bytes]:
        """One frame per list the backend yields; an error ends the stream as an error frame."""
        open_indices = set(range(req.params.n))
        try:
            _discard_finished(open_indices, first)
            yield encode_frame(first)
            async for batch in rest:
                _discard_finished(open_indices, batch)
                yield encode_frame(batch)
        except EngineError as exc:
            open_indices.clear()
            yield encode_frame(_error_event(exc))
        finally:
            if open_indices:
                # The gateway went away mid-stream: free the sequence's blocks now. This runs
                # inside a cancelled scope, so shield it or the abort itself is cancelled.
                with anyio.CancelScope(shield=True):
                    await self.backend.abort(req.request_id)

    async def count_embedding_tokens(self, req: EmbedRequest) -> int:
        """The input tokens ``embed`` will charge for ``req``; long inputs are counted off the loop."""
        if sum(len(x) for x in req.inputs) > _INLINE_COUNT_CHARS:
            return await anyio.to_thread.run_sync(self.backend.count_embedding_tokens, req)
        return self.backend.count_embedding_tokens(req)

    async def count_tokens(self, req: GenerateRequest) -> int:
        """The prompt tokens ``generate`` would charge for ``req``; a long prompt is counted off the loop."""
        if _prompt_chars(req) > _INLINE_COUNT_CHARS:
            return await anyio.to_thread.run_sync(self.backend.count_tokens, req)
        return self.backend.count_tokens(req)

    def app(self) -> Litestar:
        server = self

        @post("/engine/v1/tokens", status_code=HTTP_200_OK)
        async def tokens(request: Request[Any, Any, Any]) -> Response[Any]:
            req = await _decoded(request, GenerateRequest)
            if isinstance(req, Response):
                return req
            try:
                count = TokenCount(num_tokens=await server.count_tokens(req))
            except EngineError as exc:
                return _error_response(exc)
            return Response(_encoder.encode(count), media_type="application/json")

        @post("/engine/v1/generate", status_code=HTTP_200_OK)
        async def generate(request: Request[Any, Any, Any]) -> Response[Any]:
            req = await _decoded(request, GenerateRequest)
            if isinstance(req, Response):
                return req
            stream = server.backend.generate(req)
            try:
                # Pull the first frame here so validation errors become a plain HTTP error.
                first = await anext(stream)
            except EngineError as exc:
                return _error_response(exc)
            except StopAsyncIteration:
                body = ErrorEvent(code="engine_error", message="the engine produced no output")
                return Response(_encoder.encode(body), status_code=500, media_type="application/json")
            return Stream(server._frames(req, first, stream), media_type=FRAMES_MEDIA_TYPE)

        @websocket(LINK_PATH)
        async def link(socket: WebSocket[Any, Any, Any]) -> None:
            await socket.accept()
            session = LinkSession(server.backend, socket.send_bytes, server.count_tokens)
            await session.run(socket.iter_data(mode="binary"))

        @post("/engine/v1/embed", status_code=HTTP_200_OK)
        async def embed(request: Request[Any, Any, Any]) -> Response[Any]:
            req = await _decoded(request, EmbedRequest)
            if isinstance(req, Response):
                return req
            try:
                out = await server.backend.embed(req)
            except EngineError as exc:
                return _error_response(exc)
            result = EmbedResult(embeddings=out.embeddings, num_prompt_tokens=out.num_prompt_tokens)
            return Response(_encoder.encode(result), media_type="application/json")

        @post("/engine/v1/embed/tokens", status_code=HTTP_200_OK)
        async def embed_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
            req = await _decoded(request, EmbedRequest)
            if isinstance(req, Response):
                return req
            try:
                count = TokenCount(num_tokens=await server.count_embedding_tokens(req))
            except EngineError as exc:
                return _error_response(exc)
            return Response(_encoder.encode(count), media_type="application/json")

        @get("/engine/v1/info")
        async def info() -> Response[bytes]:
            return Response(_encoder.encode(server.info()), media_type="application/json")

        @get("/engine/v1/health")
        async def health() -> Response[bytes]:
            status = 200 if server._ready else 503
            return Response(b'{"ready": %s}' % (b"true" if server._ready else b"false"), status_code=status)

        async def on_startup() -> None:
            try:
                await server.backend.start()
            except ModelLoadError as exc:
                # Nothing loadable: stay up with no models so the gateway can say why (503).
                log.error("engine has no model in service: %s", exc)
                server._failed.setdefault("*", str(exc))
                server._ready = True
                return
            server._failed.update(server.backend.failed_models)
            server._key_operations.extend(server.backend.rank_key_operations)
            server._ready = True
            log.info("engine %s ready with %d models", server.instance_id, len(server.backend.model_infos()))

        async def on_shutdown() -> None:
            server._ready = False
            await server.backend.shutdown()

        return Litestar(
            route_handlers=[generate, link, tokens, embed, embed_tokens, info, health],
            guards=[self._guard],
            on_startup=[on_startup],
            on_shutdown=[on_shutdown],
            debug=False,
            logging_config=None,
        )
