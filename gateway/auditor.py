"""Turns the gateway's decisions into audit events and fails closed when they cannot be stored."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import msgspec

from audit.errors import AuditUnavailableError
from audit.record import AuditContent
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding
from gateway.errors import AuditUnavailable
from gateway.request_context import RequestContext
from gateway.stage_timer import StageTimer, now_ns

log = logging.getLogger("strongroom.gateway")

__all__ = ["Auditor", "RequestSink"]


class ContentSink(Protocol):
    """``AuditLog.append``: an event, and the content its policy may keep."""

    async def append(
        self, event: AuditEvent, content: AuditContent | None = None, *, served: bool = False
    ) -> int: ...


class Auditor:
    """One call per decision; returns only once the record is durable."""

    def __init__(self, sink: ContentSink, stages: StageTimer | None = None) -> None:
        """``stages``: where the time each record takes to become durable is observed."""
        self._sink = sink
        self._stages = stages

    async def record(
        self,
        ctx: RequestContext,
        event_type: EventType,
        decision: Decision,
        *,
        status: int,
        reason: str = "",
        findings: Sequence[Finding] = (),
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        model_manifest: str = "",
        content: AuditContent | None = None,
        detail: str = "",
        served: bool = False,
        endpoint: str = "",
    ) -> int:
        """``served``: the client already has (part of) its answer, e.g. a stream's final record.
        ``endpoint``: how the record names the endpoint, where not as the request's context does."""
        event = self._event(
            ctx,
            event_type,
            decision,
            status=status,
            reason=reason,
            findings=findings,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model_manifest=model_manifest,
            detail=detail,
            endpoint=endpoint,
        )
        started_ns = now_ns()
        try:
            # Only what is given: any AuditSink takes the plain call.
            if content is not None:
                seq = await self._sink.append(event, content, served=served)
            elif served:
                seq = await self._sink.append(event, served=True)
            else:
                seq = await self._sink.append(event)
            if self._stages is not None:
                self._stages.done("audit", ctx.model, started_ns)
        except AuditUnavailableError as exc:
            ctx.is_audit_down = True
            log.error("audit log unavailable, refusing request %s: %s", ctx.request_id, type(exc).__name__)
            raise AuditUnavailable("the audit log is unavailable; the request was not served") from exc
        ctx.num_records += 1
        return seq

    async def record_on_answer(
        self,
        ctx: RequestContext,
        event_type: EventType,
        decision: Decision,
        *,
        status: int,
        reason: str = "",
        detail: str = "",
        endpoint: str = "",
    ) -> None:
        """Record as the answer starts, with the status answered (see ``RequestSink.append_on_answer``)."""
        event = self._event(
            ctx, event_type, decision, status=status, reason=reason, detail=detail, endpoint=endpoint
        )
        await RequestSink(self._sink, ctx).append_on_answer(event)

    @staticmethod
    def _event(
        ctx: RequestContext,
        event_type: EventType,
        decision: Decision,
        *,
        status: int,
        reason: str,
        findings: Sequence[Finding] = (),
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        model_manifest: str = "",
        detail: str = "",
        endpoint: str = "",
    ) -> AuditEvent:
        p = ctx.principal
        return AuditEvent(
            event_type=event_type,
            decision=decision,
            request_id=ctx.request_id,
            trace_id=ctx.trace_id,
            subject=p.subject if p else "",
            roles=p.roles if p else (),
            tenant=(p.tenant or "") if p else "",
            client_ip=ctx.client_ip,
            client_app=(p.client_id or "") if p else "",
            model=ctx.model,
            model_manifest=model_manifest,
            endpoint=endpoint or ctx.endpoint,
            reason=reason,
            status=status,
            findings=tuple(findings),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_ms=round(ctx.elapsed_ms(), 3),
            engine_instance=ctx.engine_instance,
            end_user=ctx.end_user,
            detail=detail,
        )

    async def record_answer(self, ctx: RequestContext, status: int) -> int:
        """The record of a request nothing else recorded, or its ``on_answer`` record: what was
        answered, and why if an error."""
        if ctx.on_answer is not None:
            reason = ctx.error_reason if status >= 400 else ctx.on_answer.reason
            event = msgspec.structs.replace(
                ctx.on_answer, status=status, reason=reason, latency_ms=round(ctx.elapsed_ms(), 3)
            )
            ctx.on_answer = None
            return await RequestSink(self._sink, ctx).append(event)
        if status < 400:
            event_type, decision = EventType.REQUEST, Decision.ALLOW
        else:
            event_type = _TYPE_BY_STATUS.get(status, EventType.REQUEST_REJECTED)
            decision = Decision.DENY if status < 500 else Decision.ERROR
        return await self.record(ctx, event_type, decision, status=status, reason=ctx.error_reason)


_TYPE_BY_STATUS = {
    401: EventType.AUTHENTICATION_FAILURE,
    403: EventType.AUTHORIZATION_DENIAL,
    429: EventType.RATE_LIMIT,
}


class RequestSink:
    """The audit sink a handler is given: the log, with the server's ids stamped on every event.

    Handlers that build their own events (``/admin``, ``/audit``, policy changes) go through it,
    so their records carry the id the response carries, never a client header, and count
    towards the request's one record.
    """

    def __init__(self, sink: ContentSink, ctx: RequestContext) -> None:
        self._sink = sink
        self._ctx = ctx

    async def append(self, event: AuditEvent) -> int:
        ctx = self._ctx
        try:
            seq = await self._sink.append(self._stamped(event))
        except AuditUnavailableError:
            ctx.is_audit_down = True
            raise
        ctx.num_records += 1
        return seq

    async def append_on_answer(self, event: AuditEvent) -> None:
        """Record ``event`` as the answer starts, its status the one answered (RequestMiddleware
        writes it before the first byte leaves, or answers 503); at once where no middleware is."""
        if self._ctx.has_middleware:
            self._ctx.on_answer = self._stamped(event)
        else:
            await self.append(event)

    def _stamped(self, event: AuditEvent) -> AuditEvent:
        ctx = self._ctx
        return msgspec.structs.replace(
            event,
            request_id=ctx.request_id,
            trace_id=event.trace_id or ctx.trace_id,
            client_ip=event.client_ip or ctx.client_ip,
            endpoint=event.endpoint or ctx.endpoint,
        )
