"""The inference pipeline: one function per OpenAI endpoint, from parsed body to engine and back.

    (authenticated: gateway.authenticator) parse ─▶ authorize (else 404, as unknown) ─▶ model known? ─▶ count prompt
        tokens (engine) ─▶ reserve quota ─▶ filter request ─▶ engine ─▶ filter response
        (streamed: hold-back window) ─▶ settle quota ─▶ audit ─▶ answer

Every exit, allowed or refused, writes its audit record before the client sees an answer;
if the record cannot be written, the request gets 503 instead (fail closed). A streamed answer
records the decision before its first byte and its final record (usage, findings) before the
last events and ``[DONE]``; if that record cannot be written the stream ends with an error
event instead, so a client that saw ``[DONE]`` got an answer that is on the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
import msgspec

from audit.record import AuditContent
from common.audit_event import Decision, EventType
from common.finding import Finding
from engine.core.sampling_params import SamplingParams
from engine.core.structured_output import StructuredOutput
from engine.errors import EngineError, EngineUnavailableError
from engine.serving.client import EngineClient
from engine.serving.protocol import DeltaFrame, GenerateRequest, ModelCard
from filters import FilterContext, FilterPipeline, ScanBudgetError
from gateway.auditor import Auditor
from gateway.chat_filtered import ChatFiltered, audited_messages, tool_texts
from gateway.completion_builder import CompletionBuilder
from gateway.engine_pool import EnginePool
from gateway.errors import (
    BadRequestError,
    ContentPolicyError,
    GatewayError,
    ModelNotFoundError,
    NoEngineError,
    http_error_of,
    recorded_reason,
)
from gateway.openai_types import ChatCompletionRequest, CompletionRequest, ResponseFormat
from gateway.parameter_support import refuse_unsupported
from gateway.quota import QuotaLease, Quotas
from gateway.request_context import RequestContext
from gateway.response_shape import ResponseShape, fingerprint_of
from gateway.stage_timer import now_ns
from gateway.stream_writer import StreamWriter
from gateway.telemetry import Telemetry
from gateway.tool_plan import ToolPlan
from policies import Authorizer, PolicyUnavailableError

__all__ = ["InferenceService", "Prepared", "close_lease"]

log = logging.getLogger("strongroom.gateway")

_ACTIONS = {"chat": "chat", "completions": "completion"}


class Prepared(msgspec.Struct, kw_only=True):
    """A request that passed every check and holds a quota lease; ready for the engine."""

    kind: str
    ctx: RequestContext
    body: ChatCompletionRequest | CompletionRequest
    generate: GenerateRequest
    card: ModelCard
    client: EngineClient
    lease: QuotaLease
    findings: list[Finding]
    tools: ToolPlan | None = None

    @property
    def shape(self) -> ResponseShape:
        """What the answer looks like: all the completion builder and the SSE writer see."""
        params, card = self.generate.params, self.card
        tools = self.tools if self.tools is not None and self.tools.parses_calls else None
        return ResponseShape(
            is_chat=self.kind == "chat",
            model=self.body.model,
            num_choices=params.n,
            wants_logprobs=params.logprobs is not None,
            tool_syntax=tools.syntax if tools else "",
            max_tool_calls=tools.max_calls if tools else None,
            echo=(self.generate.prompt or "")
            if isinstance(self.body, CompletionRequest) and self.body.echo
            else "",
            system_fingerprint=fingerprint_of(
                card.name, card.manifest_sha256, card.dtype, card.max_model_len
            ),
        )


class InferenceService:
    """Owns the per-request pipeline; the routes only parse HTTP and hand over."""

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
        """Audit a refusal that happened after authentication and return its HTTP error."""
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
            max_tokens = self._max_tokens(body, card)
            tools = (
                ToolPlan.of(body, card.tool_syntax, body.model)
                if isinstance(body, ChatCompletionRequest)
                else None
            )
            params = self._params(body, max_tokens)
            texts = _texts_of(body, allow_token_ids=self._allow_token_ids)
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
                content=_content(body, {}),
            )
            raise ContentPolicyError("The request was blocked by the content policy")
        try:
            generate = self._generate_request(ctx, body, params, list(result.texts), tools)
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
            if _asked_max_tokens(body) is None:
                # The default fills what the context leaves; an explicit ask is never cut.
                max_tokens = max(1, min(max_tokens, card.max_model_len - num_prompt))
                generate = msgspec.structs.replace(
                    generate, params=msgspec.structs.replace(generate.params, max_tokens=max_tokens)
                )
            _check_context(body, card, num_prompt, max_tokens)
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
        """The audited HTTP error for a refusal before the engine call; anything else re-raised."""
        # GatewayError, EngineError and the sibling packages' errors all carry a status.
        if isinstance(exc, GatewayError | EngineError) or isinstance(getattr(exc, "status_code", None), int):
            return await self.reject(ctx, exc)
        raise exc

    def _max_tokens(self, body: ChatCompletionRequest | CompletionRequest, card: ModelCard) -> int:
        asked = _asked_max_tokens(body)
        param = _max_tokens_param(body)
        if asked is None:
            return min(self._default_max_tokens, max(1, card.max_model_len // 2))
        if asked < 1:
            raise BadRequestError(f"{param} must be at least 1", param=param)
        if asked >= card.max_model_len:
            err = BadRequestError(
                f"{param} is too large: {asked}. This model supports at most "
                f"{card.max_model_len - 1} completion tokens, whereas you provided {asked}.",
                param=param,
            )
            err.code = "invalid_value"
            raise err
        return asked

    def _params(self, body: ChatCompletionRequest | CompletionRequest, max_tokens: int) -> SamplingParams:
        logprobs: int | None
        if isinstance(body, ChatCompletionRequest):
            logprobs = (body.top_logprobs or 0) if body.logprobs else None
        else:
            logprobs = body.logprobs
        try:
            return SamplingParams(
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p,
                top_k=body.top_k or 0,
                min_p=body.min_p or 0.0,
                max_tokens=max_tokens,
                stop=body.stop_list,
                seed=body.seed,
                presence_penalty=body.presence_penalty or 0.0,
                frequency_penalty=body.frequency_penalty or 0.0,
                repetition_penalty=body.repetition_penalty or 1.0,
                logprobs=logprobs,
                n=body.num_choices,
                logit_bias=_logit_bias(body.logit_bias),
                ignore_eos=body.ignore_eos,
                # A plain answer is read whole, after the response filters: the engine decodes its
                # text once at the end instead of every step (the same text, less engine host time).
                output_text="delta" if body.is_stream else "final",
                # A forced tool call's grammar is set once the definitions are filtered.
                structured=_structured(body.response_format),
            )
        except EngineError as exc:
            raise BadRequestError(exc.message, param=exc.param) from None

    def _generate_request(
        self,
        ctx: RequestContext,
        body: ChatCompletionRequest | CompletionRequest,
        params: SamplingParams,
        texts: list[str],
        tools: ToolPlan | None = None,
    ) -> GenerateRequest:
        """The engine's request, built from the texts as the request filters left them (in
        ``_texts_of``'s order: contents, then call arguments, then tool definitions)."""
        common: dict[str, Any] = {
            "request_id": ctx.request_id,
            "model": body.model,
            "params": params,
            "tenant": ctx.principal.tenant if ctx.principal else None,
            "subject": ctx.principal.subject if ctx.principal else None,
        }
        if isinstance(body, ChatCompletionRequest):
            chat = ChatFiltered.of(body, texts, tools)
            if tools is not None and chat.tools is not None:
                # The forced call's grammar is built from the definitions as filtered: what the
                # policy took out of a schema (an example value, a const) reaches no engine.
                grammar = dataclasses.replace(tools, tools=tuple(chat.tools)).grammar()
                if grammar is not None:
                    common["params"] = msgspec.structs.replace(params, structured=grammar)
            return GenerateRequest(messages=chat.messages, tools=chat.tools, **common)
        prompt = _single_prompt(body.prompt)
        if isinstance(prompt, str):
            return GenerateRequest(prompt=texts[0], **common)
        return GenerateRequest(prompt_token_ids=prompt, **common)

    # -- generation --------------------------------------------------------------------------

    async def complete(self, prep: Prepared) -> bytes:
        """Non-streamed: run to the end, filter, audit, return the JSON body."""
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
            return builder.encode()
        except asyncio.CancelledError:
            # The client left (see routes.openai): leaving the engine call aborted it there.
            usage = builder.usage()
            used = usage.total_tokens
            await _shielded(
                self.auditor.record(
                    prep.ctx,
                    EventType.INFERENCE,
                    Decision.ERROR,
                    status=499,
                    reason="client disconnected",
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    model_manifest=prep.card.audit_manifest,
                    content=_content(prep.body, {}),
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
            findings=_merged(prep.findings),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model_manifest=prep.card.audit_manifest,
            content=_content(prep.body, texts),
            served=served,
        )

    async def open_stream(self, prep: Prepared) -> AsyncIterator[bytes]:
        """Start a streamed answer; refusals here still become plain HTTP errors.

        The engine call is opened and its first event read before any byte goes out, so a
        prompt that is too long is a 400 and an overloaded engine a 429, not an SSE error event;
        then the decision is audited (fail closed: 503 if it cannot be), and only then does the
        stream begin.
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
                findings=_merged(prep.findings),
                model_manifest=prep.card.audit_manifest,
            )
        except BaseException as exc:
            await _shielded(stack.aclose())
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
    ) -> AsyncIterator[bytes]:
        writer = StreamWriter(prep.shape, self.filters, _filter_context(prep), self._clock)
        is_finished = False
        serving, model = self.telemetry.serving, prep.body.model
        ttft_s: float | None = None
        last_s = 0.0
        try:
            if head := writer.start():
                yield head
            pending = [first] if first is not None else []
            async for frame in _chain(pending, frames):
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
                    serving.inter_token_latency.labels(model).observe((now_s - last_s) / num_tokens)
                last_s = now_s
                if writer.blocked:
                    break
            for chunk in writer.finish():
                yield chunk
            is_finished = True
            failure = await _shielded_outcome(self._finish_stream(prep, stack, writer, ""))
            if failure is not None:
                yield writer.error(http_error_of(failure))
                return
            if writer.blocked:
                yield writer.filter_error()
            elif prep.body.include_usage:
                yield writer.usage_chunk()
            yield b"data: [DONE]\n\n"
            serving.finished(
                model,
                e2e_s=prep.ctx.elapsed_s(),
                ttft_s=ttft_s,
                num_output_tokens=writer.usage().completion_tokens,
            )
        except EngineError as exc:
            if isinstance(exc, EngineUnavailableError):
                self.engines.mark_down(prep.client)
            is_finished = True
            outcome = f"engine failed mid-stream: {exc.code}"
            await _shielded(self._finish_stream(prep, stack, writer, outcome))
            yield writer.error(http_error_of(exc))
        finally:
            # A disconnect cancels this generator: shield the clean-up so the engine request is
            # aborted, the quota settled and released, and the outcome audited all the same.
            if not is_finished:
                await _shielded(self._finish_stream(prep, stack, writer, "client disconnected"))

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
            findings=_merged(prep.findings),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            model_manifest=prep.card.audit_manifest,
            content=_content(prep.body, writer.texts()),
            served=True,
        )


async def _chain(first: list[DeltaFrame], rest: AsyncIterator[DeltaFrame]) -> AsyncIterator[DeltaFrame]:
    for frame in first:
        yield frame
    async for frame in rest:
        yield frame


async def _shielded(awaitable: Any) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await awaitable
        except Exception:
            log.exception("clean-up after a stream failed")


async def _shielded_outcome(awaitable: Any) -> Exception | None:
    """Like ``_shielded``, but the failure comes back: the caller must not claim success after it."""
    with anyio.CancelScope(shield=True):
        try:
            await awaitable
        except Exception as exc:
            if not isinstance(exc, GatewayError):
                log.exception("finishing a stream failed")
            return exc
    return None


async def close_lease(lease: QuotaLease, used_tokens: int) -> None:
    """Charge what was really used (nothing for a refused request) and free the slot."""
    with anyio.CancelScope(shield=True):
        try:
            await lease.settle(used_tokens)
        finally:
            await lease.release()


def _content(body: ChatCompletionRequest | CompletionRequest, texts: dict[int, str]) -> AuditContent:
    """What content capture is offered (``audit.content_rules`` decide what is kept of it).

    The prompt as the client sent it: a chat's messages as JSON ``[{"role", "content"}]`` in
    order (with tool definitions, calls and call ids: ``gateway.chat_filtered``), a completion's prompt text (token ids as a JSON list). The completion as the client
    received it, after the response filters: one choice's text, or a JSON list of the choices'
    texts when ``n`` > 1.
    """
    prompt: str
    if isinstance(body, ChatCompletionRequest):
        prompt = msgspec.json.encode(audited_messages(body)).decode()
    else:
        single = _single_prompt(body.prompt)
        prompt = single if isinstance(single, str) else msgspec.json.encode(single).decode()
    choices = [text for _, text in sorted(texts.items())]
    completion = choices[0] if len(choices) == 1 else msgspec.json.encode(choices).decode() if choices else ""
    return AuditContent(prompt=prompt, completion=completion)


def _filter_context(prep: Prepared) -> FilterContext:
    roles = prep.ctx.principal.roles if prep.ctx.principal else ()
    return FilterContext(roles=roles, model=prep.body.model)


def _structured(fmt: ResponseFormat | None) -> StructuredOutput | None:
    """The engine's grammar for an OpenAI ``response_format`` (the schema itself is checked by the
    engine, which compiles it: an invalid one is a 400 naming ``response_format``)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput.json_object()
    if fmt.json_schema is None:
        raise BadRequestError(
            "response_format json_schema needs a json_schema object", param="response_format"
        )
    if fmt.json_schema.schema is None:
        return StructuredOutput.json_object()
    return StructuredOutput.json_schema(fmt.json_schema.schema)


def _asked_max_tokens(body: ChatCompletionRequest | CompletionRequest) -> int | None:
    asked = body.max_completion_tokens if isinstance(body, ChatCompletionRequest) else None
    return asked if asked is not None else body.max_tokens


def _max_tokens_param(body: ChatCompletionRequest | CompletionRequest) -> str:
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        return "max_completion_tokens"
    return "max_tokens"


def _check_context(
    body: ChatCompletionRequest | CompletionRequest, card: ModelCard, num_prompt: int, max_tokens: int
) -> None:
    """OpenAI's 400 for a prompt plus an explicit max_tokens beyond the context window."""
    if num_prompt + max_tokens <= card.max_model_len:
        return
    where = "messages" if isinstance(body, ChatCompletionRequest) else "prompt"
    err = BadRequestError(
        f"This model's maximum context length is {card.max_model_len} tokens. However, you requested "
        f"{num_prompt + max_tokens} tokens ({num_prompt} in the {where}, {max_tokens} in the completion). "
        f"Please reduce the length of the {where} or completion.",
        param=where,
    )
    err.code = "context_length_exceeded"
    raise err


def _logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``{"token id": bias}`` as (id, bias) pairs; the engine checks ranges and vocabulary."""
    if not bias:
        return ()
    pairs = []
    for key, value in bias.items():
        try:
            token_id = int(key)
        except ValueError:
            raise BadRequestError(
                f"logit_bias keys must be token ids, got '{key}'", param="logit_bias"
            ) from None
        pairs.append((token_id, float(value)))
    return tuple(sorted(pairs))


def _absent(model: str) -> ModelNotFoundError:
    return ModelNotFoundError(f"The model '{model}' does not exist", param="model")


def _texts_of(body: ChatCompletionRequest | CompletionRequest, *, allow_token_ids: bool) -> list[str]:
    """Every piece of caller text the request filters must see, in a fixed order."""
    if isinstance(body, ChatCompletionRequest):
        if not body.messages:
            raise BadRequestError("messages must not be empty", param="messages")
        try:
            out = [m.text() for m in body.messages]
        except msgspec.ValidationError as exc:
            raise BadRequestError(str(exc), param="messages") from None
        return out + tool_texts(body)
    prompt = _single_prompt(body.prompt)
    if isinstance(prompt, str):
        return [prompt]
    if not allow_token_ids:
        # The request filters read text; token ids would carry content past them unseen.
        raise BadRequestError("token-id prompts are disabled (server.allow_token_id_prompts)", param="prompt")
    return []


def _single_prompt(prompt: str | list[Any] | None) -> str | list[int]:
    """One prompt: a string or token ids, bare or as a one-element batch (None: the empty string)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
        if isinstance(prompt, str):
            return prompt
    if prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return list(prompt)
    if not prompt:
        raise BadRequestError("prompt must not be empty", param="prompt")
    err = BadRequestError(
        "prompt must be a string or a list of token ids; a batch of several prompts is not supported",
        param="prompt",
    )
    err.code = "unsupported_parameter"
    raise err


def _merged(findings: Sequence[Finding]) -> list[Finding]:
    merged: dict[tuple[str, str, str], int] = {}
    for f in findings:
        key = (f.type, f.action, f.direction)
        merged[key] = merged.get(key, 0) + f.count
    return [Finding(type=t, action=a, direction=d, count=c) for (t, a, d), c in merged.items()]
