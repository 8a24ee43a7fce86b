"""Test helpers shared by the keys tests."""

from __future__ import annotations

from audit.errors import AuditUnavailableError
from common.audit_event import AuditEvent

CHUNK = 64


class ListSink:
    """A real in-memory AuditSink: keeps every event, or refuses them all when ``down``."""

    def __init__(self, *, down: bool = False) -> None:
        self.events: list[AuditEvent] = []
        self.down = down

    async def append(self, event: AuditEvent) -> int:
        if self.down:
            raise AuditUnavailableError("audit store down")
        self.events.append(event)
        return len(self.events)
