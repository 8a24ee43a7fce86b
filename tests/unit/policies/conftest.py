from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit.errors import AuditUnavailableError
from common.audit_event import AuditEvent
from policies import AccessConfig, Authorizer


class ListSink:
    """A real in-memory AuditSink; ``failing`` makes every append fail like an unreachable log."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []
        self.failing = False

    async def append(self, event: AuditEvent) -> int:
        if self.failing:
            raise AuditUnavailableError("audit log down")
        await asyncio.sleep(0)  # a real sink yields to the loop while it writes
        self.events.append(event)
        return len(self.events)


@pytest.fixture
def sink() -> ListSink:
    return ListSink()


@pytest.fixture
def authorizer(tmp_path: Path) -> Authorizer:
    return Authorizer.open(AccessConfig(), tmp_path)
