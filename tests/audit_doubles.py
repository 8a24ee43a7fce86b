"""Test doubles for code that audits (tests only, not shipped): a real in-memory ``AuditSink``, a settable clock, sample events."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from audit.errors import AuditUnavailableError
from audit.sqlite_store import SqliteStore
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding


class MemorySink:
    """Satisfies ``AuditSink`` with a list; set ``is_available = False`` to exercise fail-closed paths."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []
        self.is_available = True

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        if not self.is_available:
            raise AuditUnavailableError("memory sink switched off")
        self.events.append(event)
        return len(self.events)


async def until(condition: Callable[[], object], *, what: str, timeout_s: float = 10.0) -> None:
    """Returns once ``condition()`` holds, for what the audit writer's threads do in their own
    time: on a loaded runner, later than any fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        await asyncio.sleep(0.005)


class GatedStore(SqliteStore):
    """A real SQLite store whose appends wait while ``gate`` is clear and fail while
    ``is_broken``; ``threads`` names the thread of each append it was given."""

    def __init__(self, path: Path, **options: Any) -> None:
        super().__init__(path, **options)
        self.gate = threading.Event()
        self.gate.set()
        self.is_broken = False
        self.threads: list[str] = []

    def append(self, rows: Any, checkpoint: Any) -> None:
        self.threads.append(threading.current_thread().name)
        self.gate.wait(10)
        if self.is_broken:
            raise AuditUnavailableError("store switched off")
        super().append(rows, checkpoint)

    async def writer_inside(self, num_before: int) -> None:
        """Returns once the writer has brought the store an append after its first ``num_before``
        (and, the gate clear, holds it there). Waited for, not slept on: on a loaded runner the
        writer can take longer than any fixed sleep to get there."""
        await until(lambda: len(self.threads) > num_before, what="the writer taking the append")


class FakeClock:
    """A wall clock that only moves when told to."""

    def __init__(self, now: float = 1_796_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sample_event(i: int = 0, **overrides: Any) -> AuditEvent:
    """Inference event number ``i``: odd ones are analyst/qwen-7b, even teller+ops/llama-8b, every 5th has a finding."""
    fields: dict[str, Any] = {
        "event_type": EventType.INFERENCE,
        "decision": Decision.ALLOW,
        "request_id": f"req-{i}",
        "subject": f"user{i % 3}",
        "roles": ("analyst",) if i % 2 else ("teller", "ops"),
        "model": "qwen-7b" if i % 2 else "llama-8b",
        "prompt_tokens": 10 + i,
        "completion_tokens": 5,
        "latency_ms": 12.5,
        "status": 200,
    }
    if i % 5 == 0:
        fields["findings"] = (Finding(type="pii.card", count=2, action="mask"),)
    fields.update(overrides)
    return AuditEvent(**fields)
