"""What any component needs to record an audit event: one async append that is durable on return."""

from __future__ import annotations

from typing import Protocol

from audit.event import AuditEvent


class AuditSink(Protocol):
    async def append(self, event: AuditEvent) -> int:
        """Store the event durably and return its sequence number.

        Raises ``audit.errors.AuditUnavailableError`` when the record could not be made durable;
        callers fail closed (the gateway answers 503).
        """
        ...
