"""Test doubles for code that audits (tests only, not shipped): a real in-memory ``AuditSink``, a settable clock, sample events."""

from __future__ import annotations

from typing import Any

from audit.errors import AuditUnavailableError
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
