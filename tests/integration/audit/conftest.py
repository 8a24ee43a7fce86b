"""Outage drill shared by the SQLite and PostgreSQL fail-closed tests, handed out as fixtures."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import psycopg
import pytest

from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from audit.postgres_store import grant_append_only, install_schema
from audit.query import AuditQuery
from audit.store import AuditStore
from common.audit_event import AuditEvent, Decision, EventType


async def _load(
    log: AuditLog, stop: asyncio.Event, ok: dict[str, int], failed: list[str], workers: int = 16
) -> None:
    counter = itertools.count()

    async def worker() -> None:
        while not stop.is_set():
            rid = f"r{next(counter)}"
            try:
                ok[rid] = await log.append(
                    AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW, request_id=rid)
                )
            except AuditUnavailableError:
                failed.append(rid)
                await asyncio.sleep(0.005)  # the gateway would be answering 503 here

    await asyncio.gather(*(worker() for _ in range(workers)))


async def run_outage(log: AuditLog, break_store, repair_store) -> tuple[dict[str, int], list[str]]:
    ok: dict[str, int] = {}
    failed: list[str] = []
    stop = asyncio.Event()
    load = asyncio.create_task(_load(log, stop, ok, failed))
    await asyncio.sleep(0.3)
    num_before = len(ok)
    await asyncio.to_thread(break_store)
    await asyncio.sleep(0.5)
    num_during = len(ok)
    await asyncio.to_thread(repair_store)
    deadline = time.monotonic() + 20  # the writer's retry finds the store back: about a second
    while len(ok) <= num_during + 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    stop.set()
    await load
    assert num_before > 0 and failed, "the outage must have refused appends"
    assert len(ok) > num_during, "appends must succeed again once the store is back"
    return ok, failed


async def check_nothing_lost(log: AuditLog, store: AuditStore, ok: dict[str, int], failed: list[str]) -> None:
    stored: dict[str, int] = {}
    after = 0
    while rows := await asyncio.to_thread(store.rows, after, 1000):
        for row in rows:
            rid = (
                row.event.split('"request_id":"', 1)[1].split('"', 1)[0]
                if '"request_id"' in row.event
                else ""
            )
            stored[rid] = row.seq
        after = rows[-1].seq
    for rid, seq in ok.items():
        assert stored.get(rid) == seq, f"acknowledged record {rid} (seq {seq}) is missing"
    outages = await log.search(AuditQuery(event_type="audit_outage"))
    assert len(outages.records) >= 1
    assert "appends refused" in outages.records[0].event.reason
    # A commit whose acknowledgement was lost may still have been kept by the store; such a
    # record must be named by an outage record, so it never passes for a served request.
    landed = {
        seq
        for record in outages.records
        for a, b in re.findall(r"records (\d+)-(\d+) were stored although", record.event.detail)
        for seq in range(int(a), int(b) + 1)
    }
    for rid in set(failed) & set(stored):
        assert stored[rid] in landed, (
            f"refused append {rid} (seq {stored[rid]}) stored without an outage note"
        )
    report = await log.verify()
    assert report.ok, report.problem


@pytest.fixture
def drill() -> SimpleNamespace:
    return SimpleNamespace(run_outage=run_outage, check_nothing_lost=check_nothing_lost)


ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@pytest.fixture
def schema_and_role() -> Iterator[tuple[str, str]]:
    try:
        admin = psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is not up: {exc}")
    suffix = uuid.uuid4().hex[:10]
    schema, role = f"audit_t_{suffix}", f"audit_app_{suffix}"
    admin.execute(f'CREATE ROLE "{role}" LOGIN')
    install_schema(admin, schema)
    grant_append_only(admin, schema, role)
    try:
        yield schema, role
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')
        admin.close()
