"""The recent policy changes for the administrator's page, read back from the audit log's
``admin_change`` records: version, what was added or removed, who and when.

A change record carries no tenant column: its domain is that of the rules it touched (the domain
field of each ``PolicyChange.describe()`` line in its detail). A tenant-scoped administrator sees a change only when
every rule it touched lies in its own domain; records it cannot place (policy imports, tamper
refusals, a line that does not parse) are shown to administrators of every tenant only: fail closed.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass

from audit.log import AuditLog
from audit.query import MAX_LIMIT, AuditQuery
from audit.record import AuditRecord
from common.audit_event import Decision, EventType
from policies.control_scope import ControlScope

QUOTA_CHANGE_PREFIX = "quota "
"""Starts the detail of every quota change record (``quota_pages``)."""

__all__ = ["PolicyHistory", "PolicyHistoryEntry"]

SHOWN = 20


@dataclass(frozen=True)
class PolicyHistoryEntry:
    seq: int
    time: str
    version: str
    """The version the change produced ("" when the record names none, e.g. a refusal)."""
    actor: str
    decision: str
    changes: tuple[tuple[str, str], ...]
    """(op, rule line) per edit, e.g. ("grant", "p, analyst, *, demo-chat, chat")."""
    note: str
    """The record's own words when it is no edit list (an import, a tamper refusal)."""


class PolicyHistory:
    @staticmethod
    async def recent(log: AuditLog, scope: ControlScope, shown: int = SHOWN) -> list[PolicyHistoryEntry]:
        """The newest ``shown`` changes ``scope`` may see, newest first. Searches run oldest first,
        so this pages through every change record keeping the last few: policy edits are rare
        (hand-made), so the whole history stays small."""
        kept: deque[PolicyHistoryEntry] = deque(maxlen=shown)
        cursor: str | None = None
        while True:
            page = await log.search(
                AuditQuery(event_type=str(EventType.ADMIN_CHANGE), cursor=cursor, limit=MAX_LIMIT)
            )
            for record in page.records:
                if record.event.detail.startswith(QUOTA_CHANGE_PREFIX):
                    continue  # a quota override, not a policy edit
                entry = _entry(record)
                if scope.is_global or _domains(entry) == {scope.domain}:
                    kept.append(entry)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return list(reversed(kept))


def _entry(record: AuditRecord) -> PolicyHistoryEntry:
    event = record.event
    changes: list[tuple[str, str]] = []
    if event.decision == Decision.ALLOW and event.before:  # an edit, not an import or refusal
        for part in event.detail.split("; "):
            op, _, line = part.partition(" ")
            changes.append((op, line))
    return PolicyHistoryEntry(
        seq=record.seq,
        time=record.time,
        version=_version(event.after),
        actor=event.subject,
        decision=str(event.decision),
        changes=tuple(changes),
        note="" if changes else ": ".join(t for t in (event.reason, event.detail) if t),
    )


def _version(after: str) -> str:
    try:
        version = json.loads(after)["version"]
    except (ValueError, TypeError, KeyError):  # no JSON state: not an edit
        return ""
    return str(version) if isinstance(version, int) else ""


def _domains(entry: PolicyHistoryEntry) -> set[str | None]:
    """The domains the entry's rules lie in; None for a record that cannot be placed."""
    if not entry.changes:
        return {None}
    found: set[str | None] = set()
    for op, line in entry.changes:
        fields = line.split(", ")
        if op in ("grant", "ungrant") and len(fields) == 5 and fields[0] == "p":
            found.add(fields[2])
        elif op in ("assign", "unassign") and len(fields) == 4 and fields[0] == "g":
            found.add(fields[3])
        else:
            found.add(None)
    return found
