"""Client-chosen strings in a record are capped and escaped; roles holding '|' stay one role."""

from __future__ import annotations

import asyncio

from audit.event_bounds import MAX_ROLES, bounded_event, bounded_text
from audit.query import AuditQuery
from common.audit_event import AuditEvent, Decision, EventType


def test_long_values_are_cut_visibly_and_control_characters_escaped() -> None:
    assert bounded_text("short", 10) == "short"
    assert bounded_text("x" * 100_000, 256) == "x" * 256 + "…[+99744 chars]"
    assert bounded_text("a\r\nforged line\x1b[2J", 100) == "a\\x0d\\x0aforged line\\x1b[2J"


def test_every_client_reachable_field_is_bounded() -> None:
    huge = "m" * 100_000
    event = AuditEvent(
        event_type=EventType.REQUEST_REJECTED,
        decision=Decision.DENY,
        request_id="r" * 60_000,
        subject=huge,
        model=huge,
        reason=f"model {huge} does not exist",
        end_user=huge,
        roles=(*(f"role{i}" for i in range(100)), "z" * 10_000),
    )
    bounded = bounded_event(event)
    assert len(bounded.request_id) < 100 and len(bounded.model) < 300 and len(bounded.subject) < 300
    assert len(bounded.reason) < 600 and len(bounded.end_user) < 300
    assert len(bounded.roles) == MAX_ROLES and bounded.roles[-1].endswith("…[+69 roles]")
    plain = AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW, model="demo", roles=("a",))
    assert bounded_event(plain) is plain


def test_appended_records_are_bounded(open_log) -> None:
    async def go():
        log = await open_log()
        seq = await log.append(
            AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW, model="m" * 100_000)
        )
        record = await log.get(seq)
        report = await log.verify()
        await log.close()
        return record, report

    record, report = asyncio.run(go())
    assert len(record.event.model) < 300 and report.ok


def test_a_role_holding_a_bar_is_one_role_in_search(open_log) -> None:
    def event(request_id: str, *roles: str) -> AuditEvent:
        return AuditEvent(
            event_type=EventType.INFERENCE, decision=Decision.ALLOW, request_id=request_id, roles=roles
        )

    async def go():
        log = await open_log()
        await log.append(event("analyst", "analyst|admin"))
        await log.append(event("admin", "admin"))
        await log.append(event("percent", "50%|x"))
        found = {}
        for role in ("admin", "analyst", "analyst|admin", "50%", "50%|x", "x"):
            page = await log.search(AuditQuery(role=role))
            found[role] = [r.event.request_id for r in page.records]
        await log.close()
        return found

    found = asyncio.run(go())
    assert found == {
        "admin": ["admin"],
        "analyst": [],
        "analyst|admin": ["analyst"],
        "50%": [],
        "50%|x": ["percent"],
        "x": [],
    }
