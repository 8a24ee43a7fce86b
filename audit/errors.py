"""The audit package's errors. Each carries the HTTP status and OpenAI-style code the gateway maps.

``AuditError`` and ``AuditUnavailableError`` are defined with the ``AuditSink`` seam in ``common``
(every producer of events catches them); the rest are the audit package's own.
"""

from __future__ import annotations

from common.audit_sink import AuditError, AuditUnavailableError

__all__ = [
    "AuditConfigError",
    "AuditError",
    "AuditForbiddenError",
    "AuditIntegrityError",
    "AuditNotFoundError",
    "AuditQueryError",
    "AuditUnavailableError",
    "AuditWriterBusyError",
]


class AuditWriterBusyError(AuditUnavailableError):
    """Another process holds the SQLite log's writer lock (a running gateway)."""


class AuditConfigError(AuditError):
    """The audit configuration or key material is unusable."""

    status_code = 500
    code = "audit_misconfigured"


class AuditForbiddenError(AuditError):
    """The caller lacks ``audit:read`` or ``audit:content``. Opaque on purpose."""

    status_code = 403
    code = "permission_denied"


class AuditNotFoundError(AuditError):
    """No such record, or no content kept for it."""

    status_code = 404
    code = "not_found"


class AuditQueryError(AuditError):
    """A malformed filter or cursor."""

    status_code = 400
    code = "invalid_request"


class AuditIntegrityError(AuditError):
    """The log or an export failed verification."""

    status_code = 500
    code = "audit_integrity"
