"""The ``/v1/embeddings`` pipeline: the chat pipeline's checks around one engine ``embed`` call.

    (authenticated) parse ─▶ authorize action "embedding" ─▶ embedding model? ─▶ filter every input
        ─▶ count input tokens (engine) ─▶ reserve quota ─▶ engine embed ─▶ settle ─▶ audit ─▶ answer

A caller who holds ``embedding`` on no model at all gets 403; one who holds it, but not on the
model asked for, gets the 404 of an absent model (names cannot be enumerated). A chat model asked
for embeddings is a 400 naming ``model``. Token-id inputs pass only where
``server.allow_token_id_prompts`` is on, as for completions: the filters read text. The audit
record carries the inputs as the prompt and the token count; the vectors are not recorded.
"""

from __future__ import annotations

import asyncio
import logging

import anyio
import msgspec

from audit.record import AuditContent
from common.audit_event import Decision, EventType
from common.finding import Finding
from engine.errors import EngineError, EngineUnavailableError
from engine.serving.protocol import EmbedRequest
from filters import FilterContext, ScanBudgetError
from gateway.embedding_types import EmbeddingData, EmbeddingList, EmbeddingRequest, EmbeddingUsage, encoded
from gateway.errors import BadRequestError, ContentPolicyError, ModelNotFoundError, PermissionDeniedError
from gateway.inference import InferenceService
from gateway.request_context import RequestContext
from gateway.shielded import close_lease
from policies import PolicyUnavailableError

__all__ = ["MAX_INPUTS", "EmbeddingService"]

log = logging.getLogger("strongroom.gateway")

ACTION = "embedding"
MAX_INPUTS = 2048
"""Inputs per request, as OpenAI allows."""


class EmbeddingService:
    """Shares the inference service's authorizer, quotas, filters, auditor and engines."""

    def __init__(self, inference: InferenceService, *, allow_token_id_inputs: bool = False) -> None:
        self.inference = inference
        self._allow_token_ids = allow_token_id_inputs

    async def embed(
        self, ctx: RequestContext, body: EmbeddingRequest
    ) -> tuple[EmbeddingList, dict[str, str]]:
        """The answer and its x-ratelimit-* headers; raises GatewayError (audited)."""
        inf = self.inference
        if ctx.principal is None:
            raise RuntimeError("embed() needs an authenticated request")
        ctx.model = body.model
        ctx.end_user = body.user or ""
        await self._authorize(ctx, body.model)
        try:
            card, client, instance = inf.card(body.model)
            ctx.engine_instance = instance
            if card.kind != "embedding":
                raise BadRequestError(
                    f"The model '{body.model}' is not an embedding model; use chat or completions",
                    param="model",
                )
            if body.dimensions is not None and not 1 <= body.dimensions <= card.embedding_size:
                raise BadRequestError(
                    f"dimensions must be between 1 and {card.embedding_size} for {body.model}",
                    param="dimensions",
                )
            texts, token_ids = self._inputs(body.input)
        except Exception as exc:
            raise await inf.rejected(ctx, exc) from None
        prompt = msgspec.json.encode(texts if token_ids is None else token_ids).decode()
        findings: list[Finding] = []
        if texts:
            texts, findings = await self._filtered(ctx, body.model, texts, prompt)
        request = EmbedRequest(
            request_id=ctx.request_id,
            model=body.model,
            input=texts if token_ids is None else None,
            input_token_ids=token_ids,
            dimensions=body.dimensions,
        )
        try:
            try:
                num_tokens = await client.count_embedding_tokens(request)
            except EngineUnavailableError:
                inf.engines.mark_down(client)
                raise
            lease = await inf.quotas.reserve(ctx.principal, body.model, num_tokens)
        except Exception as exc:
            raise await inf.rejected(ctx, exc) from None
        used = 0
        try:
            try:
                with inf.engines.track(client):
                    result = await client.embed(request)
            except EngineError as exc:
                if isinstance(exc, EngineUnavailableError):
                    inf.engines.mark_down(client)
                raise await inf.reject(ctx, exc) from None
            used = result.num_prompt_tokens
            inf.telemetry.tokens.add(used, {"kind": "prompt", "model": body.model})
            await inf.auditor.record(
                ctx,
                EventType.INFERENCE,
                Decision.ALLOW,
                status=200,
                findings=findings,
                prompt_tokens=used,
                model_manifest=card.audit_manifest,
                content=AuditContent(prompt=prompt),
            )
        except asyncio.CancelledError:
            # The client left (routes.openai cancels us): the attempt is still on the record.
            with anyio.CancelScope(shield=True):
                try:
                    await inf.auditor.record(
                        ctx,
                        EventType.INFERENCE,
                        Decision.ERROR,
                        status=499,
                        reason="client disconnected",
                        findings=findings,
                        model_manifest=card.audit_manifest,
                        content=AuditContent(prompt=prompt),
                    )
                except Exception:
                    log.exception("recording a disconnected embedding request failed")
            raise
        finally:
            await close_lease(lease, used)
        answer = EmbeddingList(
            data=[
                EmbeddingData(index=i, embedding=encoded(v, body.encoding_format))
                for i, v in enumerate(result.embeddings)
            ],
            model=body.model,
            usage=EmbeddingUsage(prompt_tokens=used, total_tokens=used),
        )
        return answer, dict(lease.headers)

    async def _authorize(self, ctx: RequestContext, model: str) -> None:
        inf, principal = self.inference, ctx.principal
        assert principal is not None
        try:
            await inf.authorizer.current()
        except PolicyUnavailableError as exc:
            raise await inf.reject(ctx, exc) from None
        if inf.authorizer.allowed(principal, ACTION, model):
            return
        if inf.authorizer.allowed_models(principal, ACTION, inf.engines.models()):
            err: Exception = ModelNotFoundError(f"The model '{model}' does not exist", param="model")
            status, reason = 404, "model not allowed"
        else:
            err = PermissionDeniedError("You are not allowed to create embeddings")
            status, reason = 403, "embedding not allowed"
        await inf.auditor.record(
            ctx, EventType.AUTHORIZATION_DENIAL, Decision.DENY, status=status, reason=reason
        )
        raise err

    async def _filtered(
        self, ctx: RequestContext, model: str, texts: list[str], prompt: str
    ) -> tuple[list[str], list[Finding]]:
        """Every input through the request filters (the texts as filtered, and the findings); a
        block refuses the whole request."""
        inf = self.inference
        assert ctx.principal is not None
        try:
            result = await inf.filters.acheck_request(
                texts, FilterContext(roles=ctx.principal.roles, model=model)
            )
        except ScanBudgetError as exc:
            raise await inf.reject(ctx, exc) from None
        if result.blocked:
            await inf.auditor.record(
                ctx,
                EventType.FILTER_ACTION,
                Decision.DENY,
                status=400,
                reason="request blocked by content policy",
                findings=list(result.findings),
                content=AuditContent(prompt=prompt),
            )
            raise ContentPolicyError("The request was blocked by the content policy")
        return list(result.texts), list(result.findings)

    def _inputs(self, raw: str | list[object]) -> tuple[list[str], list[list[int]] | None]:
        """(texts, None) or ([], token-id lists), checked for shape, emptiness and count."""
        if isinstance(raw, str):
            raw = [raw]
        if not raw:
            raise BadRequestError("input must not be empty", param="input")
        if len(raw) > MAX_INPUTS:
            raise BadRequestError(f"input holds at most {MAX_INPUTS} items", param="input")
        if all(isinstance(x, str) for x in raw):
            texts = [str(x) for x in raw]
            if any(not t for t in texts):
                raise BadRequestError("input must not contain empty strings", param="input")
            return texts, None
        if all(_is_token_id(x) for x in raw):
            raw = [raw]
        if not all(isinstance(x, list) and x and all(_is_token_id(t) for t in x) for x in raw):
            raise BadRequestError(
                "input must be a string, a list of strings, or token ids (a list or a list of lists)",
                param="input",
            )
        if not self._allow_token_ids:
            raise BadRequestError(
                "token-id inputs are disabled (server.allow_token_id_prompts)", param="input"
            )
        return [], [list(x) for x in raw]  # type: ignore[call-overload]


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
