"""The value types that cross package seams, so no package imports another only to name them.

    strongroom > gateway > policies | filters > audit > keys > engine > common

Each package may import those to its right, never one to its left (policies and filters not
each other); ``common`` imports nothing of the repository. import-linter holds both
(``[tool.importlinter]`` in pyproject.toml, run by ``make lint``). What lives here is a frozen
value type or a protocol that two packages exchange: a filter's ``Finding``, the ``AuditEvent``
every component hands to an ``AuditSink``, and the authenticated ``Principal``. Behaviour
stays in the package that owns it.
"""

from common.audit_event import AuditEvent, Decision, EventType
from common.audit_sink import AuditError, AuditSink, AuditUnavailableError
from common.finding import Finding
from common.principal import Principal

__all__ = [
    "AuditError",
    "AuditEvent",
    "AuditSink",
    "AuditUnavailableError",
    "Decision",
    "EventType",
    "Finding",
    "Principal",
]
