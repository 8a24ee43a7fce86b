"""Compliance aggregates: usage per model and role, denials per day, filter hits per day.

Computed by scanning the matching records in pages, so both stores give identical answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec

from audit.record import AuditRecord
from common.audit_event import Decision, EventType


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    role: str
    num_requests: int
    prompt_tokens: int
    completion_tokens: int


class DailyCount(msgspec.Struct, frozen=True, kw_only=True):
    day: str
    key: str
    """The event type (denials) or finding type (filter hits)."""
    count: int


class AuditAggregates(msgspec.Struct, frozen=True, kw_only=True):
    usage: list[UsageRow]
    denials: list[DailyCount]
    filter_hits: list[DailyCount]


def aggregate(records: Iterable[AuditRecord]) -> AuditAggregates:
    usage: dict[tuple[str, str], list[int]] = {}
    denials: Counter[tuple[str, str]] = Counter()
    hits: Counter[tuple[str, str]] = Counter()
    for record in records:
        event, day = record.event, record.time[:10]
        if event.event_type == EventType.INFERENCE:
            for role in event.roles or ("",):
                totals = usage.setdefault((event.model, role), [0, 0, 0])
                totals[0] += 1
                totals[1] += event.prompt_tokens
                totals[2] += event.completion_tokens
        if event.decision == Decision.DENY:
            denials[(day, str(event.event_type))] += 1
        for finding in event.findings:
            hits[(day, finding.type)] += finding.count
    return AuditAggregates(
        usage=[
            UsageRow(model=m, role=r, num_requests=t[0], prompt_tokens=t[1], completion_tokens=t[2])
            for (m, r), t in sorted(usage.items())
        ],
        denials=[DailyCount(day=d, key=k, count=c) for (d, k), c in sorted(denials.items())],
        filter_hits=[DailyCount(day=d, key=k, count=c) for (d, k), c in sorted(hits.items())],
    )
