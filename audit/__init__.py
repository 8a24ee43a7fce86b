"""Tamper-evident audit trail: chained, signed, fail-closed records and their compliance views."""

from audit.aggregates import AuditAggregates
from audit.config import AuditConfig, ContentRule
from audit.errors import AuditError, AuditUnavailableError
from audit.log import AuditLog
from audit.query import AuditPage, AuditQuery
from audit.record import AuditContent, AuditRecord
from audit.verifier import VerifyReport

__all__ = [
    "AuditAggregates",
    "AuditConfig",
    "AuditContent",
    "AuditError",
    "AuditLog",
    "AuditPage",
    "AuditQuery",
    "AuditRecord",
    "AuditUnavailableError",
    "ContentRule",
    "VerifyReport",
]
