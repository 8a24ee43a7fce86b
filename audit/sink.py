"""What any component needs to record an audit event: one async append that is durable on return."""

from __future__ import annotations

from typing import Protocol

from audit.event import AuditEvent


class AuditSink(Protocol):
    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        """Store the event durably and return its sequence number.

        Raises ``audit.errors.AuditUnavailableError`` when the record could not be made durable;
        callers fail closed (the gateway answers 503, or ends a stream with an error event).
        ``served``: the client already has its answer (a stream's final record); the outage
        record counts such refusals as cut streams, not as requests answered 503.
        """
        ...
