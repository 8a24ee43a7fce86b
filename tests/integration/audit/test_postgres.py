"""PostgreSQL store: same behaviour as SQLite, append-only role, and fail-closed on a real outage.

Uses the shared server at 127.0.0.1:5432 with a unique schema and role per test; the outage
test starts its own throwaway server (initdb/pg_ctl on a free port) so stopping it hurts nobody.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.log import AuditLog
from audit.postgres_store import PostgresStore
from audit.query import AuditQuery
from audit.record import RecordRow, encode_event, seal_row
from audit.store import StoreConflictError
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding
from tests.audit_doubles import sample_event
from tests.ports import free_port

pytestmark = pytest.mark.integration
ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


def _events() -> list[AuditEvent]:
    return [
        AuditEvent(
            event_type=EventType.INFERENCE if i % 3 else EventType.AUTHORIZATION_DENIAL,
            decision=Decision.ALLOW if i % 3 else Decision.DENY,
            request_id=f"r{i}",
            subject=f"u{i % 4}",
            roles=("analyst",) if i % 2 else ("teller",),
            model="qwen-7b",
            findings=(Finding(type="pii.card", count=1, action="mask"),) if i % 5 == 0 else (),
        )
        for i in range(30)
    ]


async def _exercise(log: AuditLog) -> tuple[list[int], list[str], list[str], bool]:
    seqs = [await log.append(e) for e in _events()]
    denied = await log.search(AuditQuery(decision="deny", role="analyst"))
    hits = await log.search(AuditQuery(finding="pii.card", limit=2))
    more = await log.search(AuditQuery(finding="pii.card", limit=2, cursor=hits.next_cursor))
    await log.checkpoint()
    report = await log.verify()
    return (
        seqs,
        [r.event.request_id for r in denied.records],
        [r.event.request_id for r in hits.records + more.records],
        report.ok,
    )


def test_postgres_behaves_like_sqlite_as_the_append_only_role(schema_and_role, tmp_path: Path) -> None:
    schema, role = schema_and_role
    dsn = f"host=127.0.0.1 port=5432 user={role} dbname=test"

    async def go():
        pg = await AuditLog.open(AuditConfig(), tmp_path / "pg", store=PostgresStore(dsn, schema))
        sq = await AuditLog.open(AuditConfig(), tmp_path / "sq")
        try:
            return await _exercise(pg), await _exercise(sq)
        finally:
            await pg.close()
            await sq.close()

    pg_result, sqlite_result = asyncio.run(go())
    assert pg_result == sqlite_result
    assert pg_result[3] is True


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_records SET subject = 'x'",
        "DELETE FROM audit_records",
        "TRUNCATE audit_records",
        "DELETE FROM audit_checkpoints",
        "UPDATE audit_meta SET value = 'x'",
        "DROP TABLE audit_records",
    ],
)
def test_append_only_role_cannot_rewrite_history(schema_and_role, tmp_path: Path, statement: str) -> None:
    schema, role = schema_and_role
    dsn = f"host=127.0.0.1 port=5432 user={role} dbname=test"

    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path, store=PostgresStore(dsn, schema))
        await log.append(_events()[0])
        await log.close()

    asyncio.run(go())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema}"')
        assert conn.execute("SELECT count(*) FROM audit_records").fetchone()[0] == 3
        conn.execute("INSERT INTO audit_meta VALUES ('probe', 'x')")  # INSERT is allowed
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def _rows(first: int, n: int) -> list[RecordRow]:
    return [
        seal_row(encode_event(sample_event(seq), seq), seq, "ab" * 32, None)
        for seq in range(first, first + n)
    ]


def _checkpoint(index: int, seq: int) -> Checkpoint:
    return Checkpoint(log_id="l", index=index, seq=seq, head="h", time="t", prev="p", key_id="k")


@pytest.mark.parametrize("batch", [3, 5_100], ids=["one-statement", "over-the-parameter-limit"])
def test_a_batch_and_its_checkpoint_land_together_or_not_at_all(schema_and_role, batch: int) -> None:
    schema, role = schema_and_role
    store = PostgresStore(f"host=127.0.0.1 port=5432 user={role} dbname=test", schema)
    store.open("l")
    store.append(_rows(1, batch), _checkpoint(1, batch))
    with pytest.raises(StoreConflictError):  # seq `batch` is taken: nothing of this batch may stay
        store.append(_rows(batch, 3), _checkpoint(2, batch + 2))
    with pytest.raises(StoreConflictError):  # checkpoint index 1 is taken: the rows must go too
        store.append(_rows(batch + 1, 2), _checkpoint(1, batch + 2))
    head = store.head()
    assert head.seq == batch
    assert head.checkpoint is not None and head.checkpoint.index == 1
    assert [r.seq for r in store.rows(0, 10_000)] == list(range(1, batch + 1))
    store.append([], _checkpoint(2, batch))  # a checkpoint alone (heartbeat)
    assert [cp.index for cp in store.checkpoints(0, 10)] == [1, 2]
    store.close()


def test_a_read_after_the_server_dropped_the_connection_reconnects(schema_and_role, tmp_path: Path) -> None:
    """E.g. after a server restart: the reader thread's idle connection is dead, the read must not be."""
    schema, role = schema_and_role
    dsn = f"host=127.0.0.1 port=5432 user={role} dbname=test"

    async def go() -> list[str]:
        log = await AuditLog.open(AuditConfig(), tmp_path, store=PostgresStore(dsn, schema))
        try:
            await log.append(_events()[1])
            await log.tail(1)  # the reader thread now holds a connection
            with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
                )
            return [r.event.request_id for r in await log.tail(2)]
        finally:
            await log.close()

    assert asyncio.run(go()) == ["", "r1"]


@pytest.fixture
def throwaway_postgres() -> Iterator[tuple[str, callable, callable]]:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    assert bins, "PostgreSQL binaries not found under /usr/lib/postgresql"
    bin_dir = bins[-1]
    root = Path(tempfile.mkdtemp(prefix="audit-pg-"))
    shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()

    def as_postgres(*args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)

    as_postgres(f"{bin_dir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=on"

    def start() -> None:
        as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-o", opts, "-w", "-l", str(root / "log"), "start")

    def stop() -> None:
        as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")

    start()
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres", start, stop
    finally:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                f"{bin_dir}/pg_ctl",
                "-D",
                str(data),
                "-m",
                "immediate",
                "stop",
            ],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_stopped_under_load(drill, throwaway_postgres, tmp_path: Path) -> None:
    dsn, start, stop = throwaway_postgres

    async def go() -> None:
        store = PostgresStore(dsn, "audit")
        log = await AuditLog.open(AuditConfig(), tmp_path, store=store)
        try:
            ok, failed = await drill.run_outage(log, stop, start)
            await drill.check_nothing_lost(log, store, ok, failed)
        finally:
            await log.close()

    os.environ.setdefault("PGCONNECT_TIMEOUT", "2")
    asyncio.run(go())
