"""Helpers shared by the audit tests (imported by name; tests have no packages)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from audit.event import AuditEvent, Decision, EventType, Finding

T = TypeVar("T")


class FakeClock:
    def __init__(self, now: float = 1_796_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def event(i: int = 0, **overrides: Any) -> AuditEvent:
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
