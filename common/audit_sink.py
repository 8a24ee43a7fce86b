"""What any component needs to record an audit event: one async append that is durable on return.

The seam's two errors live with it, so a producer (a policy store, a key operation) can fail
closed on a refused append without importing the audit package; ``audit.errors`` builds the
rest of the audit errors on ``AuditError``.
"""

from __future__ import annotations

from typing import Protocol

from common.audit_event import AuditEvent


class AuditError(Exception):
    """Base of every audit error. Carries the HTTP status and OpenAI-style code the gateway maps."""

    status_code: int = 500
    code: str = "audit_error"


class AuditUnavailableError(AuditError):
    """The record could not be made durable; the caller must fail closed."""

    status_code = 503
    code = "audit_unavailable"


class AuditSink(Protocol):
    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        """Store the event durably and return its sequence number.

        Raises ``AuditUnavailableError`` when the record could not be made durable; callers fail
        closed (the gateway answers 503, or ends a stream with an error event). ``served``: the
        client already has its answer (a stream's final record); the outage record counts such
        refusals as cut streams, not as requests answered 503.
        """
        ...
