"""The inference pipeline, from a parsed body to the engine and back, for every transport.

The HTTP routes (``gateway.routes.openai``) and the gRPC servicer (``gateway.grpc_api``) both
authenticate the caller into the request's context, parse their body into the OpenAI types and
call ``prepare`` then ``complete`` (a typed answer) or ``open_stream`` (typed chunks, see
``gateway.stream_events``); each only encodes what comes back. So every check below holds for
both, from the one implementation.

    (authenticated: gateway.authenticator) parse ─▶ authorize (else 404, as unknown) ─▶ model known? ─▶ count prompt
        tokens (engine) ─▶ reserve quota ─▶ filter request ─▶ engine ─▶ filter response
        (streamed: hold-back window) ─▶ settle quota ─▶ audit ─▶ answer

Every exit, allowed or refused, writes its audit record before the client sees an answer;
if the record cannot be written, the request gets 503 instead (fail closed). A streamed answer
records the decision before its first chunk and its final record (usage, findings) before its
last chunks; if that record cannot be written the stream ends with a ``StreamError`` instead, so
a client that saw a stream end well (``[DONE]``, an OK status) got an answer that is on the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import msgspec

from common.audit_event import Decision, EventType
from engine.errors import EngineError, EngineUnavailableError
from engine.serving.client import EngineClient
from engine.serving.protocol import DeltaFrame, ModelCard
from filters import FilterContext, FilterPipeline, ScanBudgetError
from gateway.audit_content import content_of, merged
from gateway.auditor import Auditor
from gateway.completion_builder import CompletionBuilder
from gateway.engine_pool import EnginePool
from gateway.engine_request import (
    asked_max_tokens,
    check_context,
    generate_request,
    max_tokens_of,
    sampling_params,
    texts_of,
)
from gateway.errors import (
    BadRequestError,
    ContentPolicyError,
    GatewayError,
    ModelNotFoundError,
    NoEngineError,
    http_error_of,
    recorded_reason,
)
from gateway.openai_types import ChatCompletion, ChatCompletionRequest, Completion, CompletionRequest
from gateway.parameter_support import refuse_unsupported
from gateway.prepared import Prepared
from gateway.quota import Quotas
from gateway.request_context import RequestContext
from gateway.shielded import close_lease, shielded, shielded_outcome
from gateway.stage_timer import now_ns
from gateway.stream_events import StreamError, StreamEvent
from gateway.stream_writer import StreamWriter
from gateway.telemetry import Telemetry
from gateway.tool_plan import ToolPlan
from policies import Authorizer, PolicyUnavailableError

__all__ = ["InferenceService", "Prepared", "close_lease"]

log = logging.getLogger("strongroom.gateway")

_ACTIONS = {"chat": "chat", "completions": "completion"}


class InferenceService:
    """Owns the per-request pipeline; the transports only parse, hand over and encode."""

    def __init__(
        self,
        *,
        authorizer: Authorizer,
        quotas: Quotas,
        filters: FilterPipeline,
        auditor: Auditor,
        engines: EnginePool,
        telemetry: Telemetry,
        default_max_tokens: int = 1024,
        allow_token_id_prompts: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.authorizer = authorizer
        self.quotas = quotas
        self.filters = filters
        self.auditor = auditor
        self.engines = engines
        self.telemetry = telemetry
        self._stages = telemetry.serving.stages
        self._default_max_tokens = default_max_tokens
        self._allow_token_ids = allow_token_id_prompts
        self._clock = clock

    # -- checks ------------------------------------------------------------------------------

    async def reject(self, ctx: RequestContext, exc: BaseException) -> GatewayError:
        """Audit a refusal that happened after authentication and return its error (with the
        HTTP status it carries; gRPC maps that to a status code)."""
        err = http_error_of(exc)
        kind = {
            403: EventType.AUTHORIZATION_DENIAL,
            429: EventType.RATE_LIMIT,
        }.get(err.status_code, EventType.REQUEST_REJECTED)
        decision = Decision.ERROR if err.status_code >= 500 else Decision.DENY
        await self.auditor.record(ctx, kind, decision, status=err.status_code, reason=recorded_reason(err))
        return err

    def card(self, model: str) -> tuple[ModelCard, EngineClient, str]:
        card = self.engines.models().get(model)
        if card is None:
            if not self.engines.is_ready or self.engines.known_model(model):
                raise NoEngineError(f"no engine serving model {model!r} is available")
            raise _absent(model)
        picked = self.engines.pick(model)
        if picked is None:
            raise NoEngineError(f"no engine is available for model {model!r}")
        return card, picked[0], picked[1]

    async def prepare(
        self, ctx: RequestContext, kind: str, body: ChatCompletionRequest | CompletionRequest
    ) -> Prepared:
        """Everything between a parsed body and the engine call (for an authenticated caller).
        Raises GatewayError (audited)."""
        if ctx.principal is None:
            raise RuntimeError("prepare() needs an authenticated request")
        ctx.model = body.model
        ctx.end_user = body.user or getattr(body, "safety_identifier", None) or ""
        started_ns = now_ns()
        try:
            await self.authorizer.current()  # a change whose call has returned is in force here
        except PolicyUnavailableError as exc:
            raise await self.reject(ctx, exc) from None
        is_allowed = self.authorizer.allowed(ctx.principal, _ACTIONS[kind], body.model)
        self._stages.done("policy", body.model, started_ns)
        if not is_allowed:
            # Answered exactly like a model that does not exist, before the engines are asked
            # (a known model's outage would be a 503), so names cannot be enumerated; the audit
            # record says what really happened.
            await self.auditor.record(
                ctx, EventType.AUTHORIZATION_DENIAL, Decision.DENY, status=404, reason="model not allowed"
            )
            raise _absent(body.model)
        try:
            refuse_unsupported(body)
            card, client, instance = self.card(body.model)
            ctx.engine_instance = instance
            if card.kind == "embedding":
                raise BadRequestError(
                    f"The model '{body.model}' is an embedding model; use /v1/embeddings", param="model"
                )
            max_tokens = max_tokens_of(body, card, self._default_max_tokens)
            tools = (
                ToolPlan.of(body, card.tool_syntax, body.model)
                if isinstance(body, ChatCompletionRequest)
                else None
            )
            params = sampling_params(body, max_tokens)
            texts = texts_of(body, allow_token_ids=self._allow_token_ids)
        except Exception as exc:
            raise await self.rejected(ctx, exc) from None
        # The filters first: a request they refuse costs the engine nothing (counting a 1 MB
        # prompt's tokens takes an engine about a second), and the count is of what is sent.
        started_ns = now_ns()
        try:
            result = await self.filters.acheck_request(
                texts, FilterContext(roles=ctx.principal.roles, model=body.model)
            )
        except ScanBudgetError as exc:
            raise await self.reject(ctx, exc) from None
        self._stages.done("request_filter", body.model, started_ns)
        findings = list(result.findings)
        if result.blocked:
            await self.auditor.record(
                ctx,
                EventType.FILTER_ACTION,
                Decision.DENY,
                status=400,
                reason="request blocked by content policy",
                findings=findings,
                content=content_of(body, {}),
            )
            raise ContentPolicyError("The request was blocked by the content policy")
        try:
            generate = generate_request(ctx, body, params, list(result.texts), tools)
        except Exception as exc:
            raise await self.rejected(ctx, exc) from None
        try:
            # Counted by the engine, with the model's own template and tokenizer, before anything
            # is reserved: a guess (bytes / 3) let concurrent requests overrun token quotas.
            try:
                num_prompt = await client.count_tokens(generate)
            except EngineUnavailableError:
                self.engines.mark_down(client)
                raise
            if asked_max_tokens(body) is None:
                # The default fills what the context leaves; an explicit ask is never cut.
                max_tokens = max(1, min(max_tokens, card.max_model_len - num_prompt))
                generate = msgspec.structs.replace(
                    generate, params=msgspec.structs.replace(generate.params, max_tokens=max_tokens)
                )
            check_context(body, card, num_prompt, max_tokens)
            started_ns = now_ns()
            lease = await self.quotas.reserve(
                ctx.principal, body.model, num_prompt + params.n * max_tokens, max_tokens=max_tokens
            )
            self._stages.done("quota", body.model, started_ns)
        except Exception as exc:
            raise await self.rejected(ctx, exc) from None
        return Prepared(
            kind=kind,
            ctx=ctx,
            body=body,
            generate=generate,
            card=card,
            client=client,
            lease=lease,
            findings=findings,
            tools=tools,
        )

    async def rejected(self, ctx: RequestContext, exc: Exception) -> BaseException:
        """The audited error for a refusal before the engine call; anything else re-raised."""
        # GatewayError, EngineError and the sibling packages' errors all carry a status.
        if isinstance(exc, GatewayError | EngineError) or isinstance(getattr(exc, "status_code", None), int):
            return await self.reject(ctx, exc)
        raise exc

    # -- generation --------------------------------------------------------------------------

    async def complete(self, prep: Prepared) -> ChatCompletion | Completion:
        """Non-streamed: run to the end, filter, audit, return the answer."""
        builder = CompletionBuilder(prep.shape, self._clock)
        used = 0
        try:
            try:
                started_ns = now_ns()
                with self.engines.track(prep.client):
                    async with prep.client.generate(prep.generate) as frames:
                        async for frame in self._stages.timed_frames(frames, prep.body.model, started_ns):
                            for event in frame:
                                builder.add(event)
            except EngineError as exc:
                if isinstance(exc, EngineUnavailableError):
                    self.engines.mark_down(prep.client)
                used = builder.usage().total_tokens
                raise await self.reject(prep.ctx, exc) from None
            ctx_f = _filter_context(prep)
            started_ns = now_ns()
            for index, text in builder.texts().items():
                result = await self.filters.acheck_response(text, ctx_f)
                prep.findings.extend(result.findings)
                builder.replace(index, "" if result.blocked else result.texts[0], blocked=result.blocked)
            self._stages.done("response_filter", prep.body.model, started_ns)
            usage = builder.usage()
            used = usage.total_tokens
            await self._audit_done(
                prep, usage.prompt_tokens, usage.completion_tokens, builder.any_blocked, builder.texts()
            )
            self.telemetry.serving.finished(
                prep.body.model,
                e2e_s=prep.ctx.elapsed_s(),
                ttft_s=None,
                num_output_tokens=usage.completion_tokens,
            )
            return builder.build()
        except asyncio.CancelledError:
            # The client left (see routes.openai): leaving the engine call aborted it there.
            usage = builder.usage()
            used = usage.total_tokens
            await shielded(
                self.auditor.record(
                    prep.ctx,
                    EventType.INFERENCE,
                    Decision.ERROR,
                    status=499,
                    reason="client disconnected",
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    model_manifest=prep.card.audit_manifest,
                    content=content_of(prep.body, {}),
                )
            )
            raise
        finally:
            await close_lease(prep.lease, used)

    async def _audit_done(
        self,
        prep: Prepared,
        prompt_tokens: int,
        completion_tokens: int,
        blocked: bool,
        texts: dict[int, str],
        *,
        served: bool = False,
    ) -> None:
        self.telemetry.tokens.add(prompt_tokens, {"kind": "prompt", "model": prep.body.model})
        self.telemetry.tokens.add(completion_tokens, {"kind": "completion", "model": prep.body.model})
        await self.auditor.record(
            prep.ctx,
            EventType.FILTER_ACTION if blocked else EventType.INFERENCE,
            Decision.ALLOW,
            status=200,
            reason="response blocked by content policy" if blocked else "",
            findings=merged(prep.findings),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model_manifest=prep.card.audit_manifest,
            content=content_of(prep.body, texts),
            served=served,
        )

    async def open_stream(self, prep: Prepared) -> AsyncGenerator[StreamEvent, None]:
        """Start a streamed answer; refusals here are still raised, before any chunk.

        The engine call is opened and its first event read before any chunk goes out, so a
        prompt that is too long is a 400 and an overloaded engine a 429, not an error at the end
        of a stream; then the decision is audited (fail closed: 503 if it cannot be), and only
        then does the stream begin. The stream yields chunks and, if it ends in an error, a last
        ``StreamError``; its final record is written before it ends either way.
        """
        stack = contextlib.AsyncExitStack()
        try:
            started_ns = now_ns()
            stack.enter_context(self.engines.track(prep.client))
            frames = await stack.enter_async_context(prep.client.generate(prep.generate))
            iterator = self._stages.timed_frames(frames, prep.body.model, started_ns).__aiter__()
            first = await anext(iterator, None)
            await self.auditor.record(
                prep.ctx,
                EventType.INFERENCE,
                Decision.ALLOW,
                status=200,
                reason="stream started",
                findings=merged(prep.findings),
                model_manifest=prep.card.audit_manifest,
            )
        except BaseException as exc:
            await shielded(stack.aclose())
            await close_lease(prep.lease, 0)
            if isinstance(exc, EngineError):
                if isinstance(exc, EngineUnavailableError):
                    self.engines.mark_down(prep.client)
                raise await self.reject(prep.ctx, exc) from None
            raise
        return self._stream(prep, stack, first, iterator)

    async def _stream(
        self,
        prep: Prepared,
        stack: contextlib.AsyncExitStack,
        first: DeltaFrame | None,
        frames: AsyncIterator[DeltaFrame],
    ) -> AsyncGenerator[StreamEvent, None]:
        writer = StreamWriter(prep.shape, self.filters, _filter_context(prep), self._clock)
        is_finished = False
        serving, model = self.telemetry.serving, prep.body.model
        ttft_s: float | None = None
        last_s = 0.0
        inter_token = serving.inter_token_latency.labels(model)  # once, not per frame
        try:
            for chunk in writer.start():
                yield chunk
            frame = first
            while frame is not None:  # the first frame, then the rest (no generator in between)
                for event in frame:  # a frame: one engine step's deltas, one per choice
                    for chunk in writer.add(event):
                        yield chunk
                    if writer.blocked:
                        break
                # Token latencies as the client sees them: from arrival, then between frames.
                now_s = prep.ctx.elapsed_s()
                num_tokens = sum(len(event.token_ids) for event in frame)
                if ttft_s is None:
                    ttft_s = now_s
                    serving.time_to_first_token.labels(model).observe(now_s)
                elif num_tokens:
                    inter_token.observe((now_s - last_s) / num_tokens)
                last_s = now_s
                if writer.blocked:
                    break
                frame = await anext(frames, None)
            for chunk in writer.finish():
                yield chunk
            is_finished = True
            failure = await shielded_outcome(self._finish_stream(prep, stack, writer, ""))
            if failure is not None:
                yield StreamError(http_error_of(failure))
                return
            serving.finished(
                model,
                e2e_s=prep.ctx.elapsed_s(),
                ttft_s=ttft_s,
                num_output_tokens=writer.usage().completion_tokens,
            )
            if writer.blocked:
                yield writer.filter_error()
            elif prep.body.include_usage:
                yield writer.usage_chunk()
        except EngineError as exc:
            if isinstance(exc, EngineUnavailableError):
                self.engines.mark_down(prep.client)
            is_finished = True
            outcome = f"engine failed mid-stream: {exc.code}"
            await shielded(self._finish_stream(prep, stack, writer, outcome))
            yield StreamError(http_error_of(exc))
        finally:
            # A disconnect cancels this generator: shield the clean-up so the engine request is
            # aborted, the quota settled and released, and the outcome audited all the same.
            if not is_finished:
                await shielded(self._finish_stream(prep, stack, writer, prep.early_end))

    async def _finish_stream(
        self, prep: Prepared, stack: contextlib.AsyncExitStack, writer: StreamWriter, outcome: str
    ) -> None:
        await stack.aclose()
        self._stages.observe("response_filter", prep.body.model, writer.filter_ns * 1e-9)
        usage = writer.usage()
        prep.findings.extend(writer.findings)
        await close_lease(prep.lease, usage.total_tokens)
        if not outcome:
            await self._audit_done(
                prep,
                usage.prompt_tokens,
                usage.completion_tokens,
                writer.blocked,
                writer.texts(),
                served=True,
            )
            return
        await self.auditor.record(
            prep.ctx,
            EventType.INFERENCE,
            Decision.ERROR,
            status=200,
            reason=outcome,
            findings=merged(prep.findings),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            model_manifest=prep.card.audit_manifest,
            content=content_of(prep.body, writer.texts()),
            served=True,
        )


def _filter_context(prep: Prepared) -> FilterContext:
    roles = prep.ctx.principal.roles if prep.ctx.principal else ()
    return FilterContext(roles=roles, model=prep.body.model)


def _absent(model: str) -> ModelNotFoundError:
    return ModelNotFoundError(f"The model '{model}' does not exist", param="model")
