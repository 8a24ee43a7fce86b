"""Turns the gateway's decisions into audit events and fails closed when they cannot be stored."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from audit.errors import AuditUnavailableError
from audit.event import AuditEvent, Decision, EventType, Finding
from audit.sink import AuditSink
from gateway.errors import AuditUnavailable
from gateway.request_context import RequestContext

log = logging.getLogger("strongroom.gateway")

__all__ = ["Auditor"]


class Auditor:
    """One call per decision; returns only once the record is durable."""

    def __init__(self, sink: AuditSink) -> None:
        self._sink = sink

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
        detail: str = "",
        served: bool = False,
    ) -> int:
        """``served``: the client already has (part of) its answer, e.g. a stream's final record."""
        p = ctx.principal
        event = AuditEvent(
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
            endpoint=ctx.endpoint,
            reason=reason,
            status=status,
            findings=tuple(findings),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_ms=round(ctx.elapsed_ms(), 3),
            engine_instance=ctx.engine_instance,
            detail=detail,
        )
        try:
            if served:
                return await self._sink.append(event, served=True)
            return await self._sink.append(event)
        except AuditUnavailableError as exc:
            log.error("audit log unavailable, refusing request %s: %s", ctx.request_id, type(exc).__name__)
            raise AuditUnavailable("the audit log is unavailable; the request was not served") from exc
