"""``InferenceServicer``: each gRPC call authenticated, parsed and handed to the HTTP routes' pipeline.

    metadata authorization ─▶ Authenticator.caller ─▶ proto -> OpenAI body (messages.py)
        ─▶ InferenceService.prepare ─▶ complete | open_stream      (or EmbeddingService.embed,
        ─▶ typed answer -> proto, or an error -> status (status.py)   or the model catalog)

Thin, as the routes are: everything that decides (policy, filters, quotas, audit, engines) is the
inference service's, shared with HTTP. What HTTP's ``RequestMiddleware`` does for a request, this
does for a call: a fresh request id (``x-request-id`` in the initial metadata, or the trailing one
of an error), a span, the request metrics, and the one audit record of a call nothing else
recorded (a model listing, an error before any decision) before the answer; if that record
cannot be written the answer is UNAVAILABLE instead. Records name the endpoint
``grpc /strongroom.v1.Inference/<Method>``: that is how the log tells a gRPC call from an HTTP one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from google.protobuf.message import Message
from grpc.aio import ServicerContext as Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gateway.errors import BadRequestError, GatewayError, http_error_of, recorded_reason
from gateway.grpc_api import inference_pb2 as pb
from gateway.grpc_api import inference_pb2_grpc as pb_grpc
from gateway.grpc_api import messages
from gateway.grpc_api.status import status_of
from gateway.model_catalog import visible_models
from gateway.request_context import RequestContext, new_request_id
from gateway.services import Services
from gateway.stream_events import StreamError, StreamEvent

__all__ = ["ENDPOINT_PREFIX", "InferenceServicer"]

ENDPOINT_PREFIX = "grpc /strongroom.v1.Inference/"
"""How audit records and metrics name a gRPC call's endpoint (then the method's name)."""

_M = TypeVar("_M", bound=Message)
_T = TypeVar("_T")


@dataclass
class _Call:
    """One call's request context and what its span and metrics need at the end."""

    ctx: RequestContext
    span: Span
    route: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 200


class InferenceServicer(pb_grpc.InferenceServicer):
    def __init__(self, services: Services) -> None:
        self._services = services

    # -- the calls -----------------------------------------------------------------------------

    async def Chat(self, request: pb.ChatCompletionRequest, context: Context) -> pb.ChatCompletion:
        return await self._unary(
            context, "Chat", lambda ctx: self._complete(ctx, "chat", request, pb.ChatCompletion())
        )

    async def Complete(self, request: pb.CompletionRequest, context: Context) -> pb.Completion:
        return await self._unary(
            context, "Complete", lambda ctx: self._complete(ctx, "completions", request, pb.Completion())
        )

    async def ChatStream(
        self, request: pb.ChatCompletionRequest, context: Context
    ) -> AsyncIterator[pb.ChatCompletionChunk]:
        # An async generator function itself: grpc.aio runs any other handler in a thread.
        chunks = self._streamed(
            context, "ChatStream", lambda ctx: self._open(ctx, "chat", request), pb.ChatCompletionChunk
        )
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk

    async def CompleteStream(
        self, request: pb.CompletionRequest, context: Context
    ) -> AsyncIterator[pb.CompletionChunk]:
        chunks = self._streamed(
            context, "CompleteStream", lambda ctx: self._open(ctx, "completions", request), pb.CompletionChunk
        )
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk

    async def Embed(self, request: pb.EmbeddingRequest, context: Context) -> pb.EmbeddingList:
        async def work(ctx: RequestContext) -> tuple[pb.EmbeddingList, dict[str, str]]:
            body = await self._parsed(ctx, lambda: messages.embedding_request(request))
            answer, headers = await self._services.embeddings.embed(ctx, body)
            return messages.embedding_list(answer), headers

        return await self._unary(context, "Embed", work)

    async def ListModels(self, request: pb.ListModelsRequest, context: Context) -> pb.ModelList:
        async def work(ctx: RequestContext) -> tuple[pb.ModelList, dict[str, str]]:
            assert ctx.principal is not None  # _unary authenticated the call
            services = self._services
            models = await visible_models(ctx.principal, services.engines, services.authorizer)
            return messages.model_list(list(models.values())), {}

        return await self._unary(context, "ListModels", work)

    # -- the pipeline, as the routes call it -----------------------------------------------------

    async def _parsed(self, ctx: RequestContext, parse: Callable[[], _T]) -> _T:
        try:
            return parse()
        except BadRequestError as exc:
            raise await self._services.inference.reject(ctx, exc) from None

    def _body(self, ctx: RequestContext, kind: str, request: Message, *, stream: bool) -> Awaitable[Any]:
        if kind == "chat":
            assert isinstance(request, pb.ChatCompletionRequest)
            return self._parsed(ctx, lambda: messages.chat_request(request, stream=stream))
        assert isinstance(request, pb.CompletionRequest)
        return self._parsed(ctx, lambda: messages.completion_request(request, stream=stream))

    async def _complete(
        self, ctx: RequestContext, kind: str, request: Message, into: _M
    ) -> tuple[_M, dict[str, str]]:
        inference = self._services.inference
        prep = await inference.prepare(ctx, kind, await self._body(ctx, kind, request, stream=False))
        answer = await inference.complete(prep)
        return messages.proto_of(answer, into), prep.headers

    async def _open(
        self, ctx: RequestContext, kind: str, request: Message
    ) -> tuple[AsyncGenerator[StreamEvent, None], dict[str, str]]:
        inference = self._services.inference
        prep = await inference.prepare(ctx, kind, await self._body(ctx, kind, request, stream=True))
        return await inference.open_stream(prep), prep.headers

    # -- what RequestMiddleware does for HTTP ----------------------------------------------------

    async def _unary(
        self,
        context: Context,
        method: str,
        work: Callable[[RequestContext], Awaitable[tuple[_M, dict[str, str]]]],
    ) -> _M:
        call = self._begin(context, method)
        try:
            try:
                await self._services.authenticator.caller(call.ctx, _authorization(context))
                answer, headers = await work(call.ctx)
                await self._record_answer(call.ctx, 200)
            except asyncio.CancelledError:
                call.status = 499
                raise
            except Exception as exc:
                failure = await self._failure(call.ctx, exc)
            else:
                await context.send_initial_metadata(_initial(call.ctx, headers))
                return answer
            await self._abort(context, call, failure)
        finally:
            self._end(call)

    async def _streamed(
        self,
        context: Context,
        method: str,
        open_: Callable[
            [RequestContext], Awaitable[tuple[AsyncGenerator[StreamEvent, None], dict[str, str]]]
        ],
        chunk_type: type[_M],
    ) -> AsyncGenerator[_M, None]:
        call = self._begin(context, method)
        try:
            try:
                await self._services.authenticator.caller(call.ctx, _authorization(context))
                events, headers = await open_(call.ctx)
            except asyncio.CancelledError:
                call.status = 499
                raise
            except Exception as exc:
                await self._abort(context, call, await self._failure(call.ctx, exc))
            await context.send_initial_metadata(_initial(call.ctx, headers))
            # Closing this generator (the client left) closes ``events``: the engine request is
            # aborted, the quota settled and the outcome recorded at once.
            async with contextlib.aclosing(events):
                async for event in events:
                    if isinstance(event, StreamError):
                        # Its chunks went out, its record is written: the status ends the call.
                        await self._abort(context, call, event.error)
                    yield messages.proto_of(event, chunk_type())
        finally:
            self._end(call)

    def _begin(self, context: Context, method: str) -> _Call:
        route = ENDPOINT_PREFIX + method
        request_id = new_request_id()
        span = self._services.telemetry.tracer.start_span(
            route,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": "strongroom.v1.Inference",
                "rpc.method": method,
                "strongroom.request_id": request_id,
            },
        )
        ctx = RequestContext(
            request_id=request_id,
            endpoint=route,
            client_ip=_client_ip(context.peer()),
            trace_id=format(span.get_span_context().trace_id, "032x"),
        )
        return _Call(ctx=ctx, span=span, route=route)

    def _end(self, call: _Call) -> None:
        call.span.set_attribute("strongroom.status", call.status)
        if call.status >= 500:
            call.span.set_status(Status(StatusCode.ERROR))
        call.span.end()
        telemetry = self._services.telemetry
        labels: dict[str, str | int] = {"route": call.route, "status": call.status}
        telemetry.request_duration.record(time.perf_counter() - call.started, labels)
        telemetry.requests.add(1, labels)

    async def _record_answer(self, ctx: RequestContext, status: int) -> None:
        """The call's one record, where nothing in the pipeline wrote one."""
        if ctx.num_records == 0 and not ctx.is_audit_down:
            await self._services.inference.auditor.record_answer(ctx, status)

    async def _failure(self, ctx: RequestContext, exc: Exception) -> GatewayError:
        """The error a call ends with: ``exc``'s, once on the record (else audit-unavailable)."""
        err = http_error_of(exc)
        ctx.error_reason = recorded_reason(err)
        try:
            await self._record_answer(ctx, err.status_code)
        except GatewayError as audit_down:
            return audit_down
        return err

    async def _abort(self, context: Context, call: _Call, err: GatewayError) -> NoReturn:
        """End the call with ``err``'s status (``context.abort`` raises)."""
        call.status = err.status_code
        code, details, trailing = status_of(err, call.ctx.request_id)
        await context.abort(code, details, trailing)
        raise AssertionError("grpc.aio's abort returned")


def _authorization(context: Context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            return value
    return None


def _initial(ctx: RequestContext, headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return (("x-request-id", ctx.request_id), *((k.lower(), str(v)) for k, v in headers.items()))


def _client_ip(peer: str) -> str:
    """``ipv4:10.0.0.1:5123`` / ``ipv6:[::1]:5123`` -> the address; anything else (unix:) -> ''."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return ""
