"""One writer owns the SQLite log: its lock, its file descriptors, and readers that cannot write.

Issue 17, finding 1: ``_sync_database`` opened and closed a second descriptor of audit.db in the
writer, which on Linux drops every POSIX lock the process holds on the file; the next reader
process to close its connection then checkpointed and deleted the WAL the writer was still
appending to, and acknowledged records vanished.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.errors import AuditIntegrityError, AuditUnavailableError, AuditWriterBusyError
from audit.log import AuditLog
from audit.query import AuditQuery
from audit.record import encode_event, genesis_hash, seal_row
from audit.sqlite_store import SqliteStore
from tests.audit_doubles import sample_event


def _append(store: SqliteStore, first: int, n: int, prev: str) -> str:
    for seq in range(first, first + n):
        row = seal_row(encode_event(sample_event(seq), 1_000_000 * seq), seq, prev, None)
        store.append([row], None)
        prev = row.hash
    return prev


def _in_other_process(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def _count_elsewhere(path: Path) -> int:
    return int(
        _in_other_process(
            f"import sqlite3; print(sqlite3.connect({str(path)!r}).execute('select count(*) from audit_records').fetchone()[0])"
        )
    )


def test_a_reader_process_closing_its_connection_leaves_the_writers_wal_alone(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    store = SqliteStore(path, preallocate_wal_bytes=0)
    store.open("log")
    prev = _append(store, 1, 50, genesis_hash("log"))
    store.maintain()  # copies frames and fdatasyncs the database: the old code's second descriptor
    # A careless reader (an old CLI, the sqlite3 shell) with a read-write connection: closing the
    # last connection it has checkpoints and deletes the WAL unless the writer still holds its locks.
    assert _count_elsewhere(path) == 50
    assert Path(f"{path}-wal").exists()
    _append(store, 51, 10, prev)
    assert _count_elsewhere(path) == 60  # the old code wrote these into a deleted WAL
    store.close()


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    first = SqliteStore(path)
    first.open("log")
    with pytest.raises(AuditWriterBusyError, match=f"pid {os.getpid()}"):
        SqliteStore(path).open("log")
    first.close()
    second = SqliteStore(path)
    assert second.open("other").log_id == "log"
    second.close()


def test_the_lock_dies_with_its_process_and_a_waiting_writer_takes_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    code = (
        "from audit.sqlite_store import SqliteStore; from pathlib import Path; import time; "
        f"SqliteStore(Path({str(path)!r})).open('log'); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(AuditWriterBusyError):
            SqliteStore(path).open("log")
        threading.Timer(0.2, holder.kill).start()
        waiting = SqliteStore(path, lock_wait_s=20)
        assert waiting.open("other").log_id == "log"  # blocks until the holder is gone
        waiting.close()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_read_only_store_reads_and_never_writes(tmp_path: Path) -> None:
    async def seed() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path)
        await log.append(sample_event(1))
        await log.close()

    asyncio.run(seed())
    path = tmp_path / "audit" / "audit.db"
    before = path.read_bytes()
    reader = SqliteStore.read_only(path)
    head = reader.open("ignored")
    assert head.seq == 3 and head.checkpoint is not None and head.checkpoint.final
    assert [r.seq for r in reader.tail(3)] == [1, 2, 3]
    with pytest.raises(AuditUnavailableError, match="read-only"):
        _append(reader, 4, 1, head.hash)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn().execute("INSERT INTO audit_meta VALUES ('x', 'y')")
    reader.close()
    assert path.read_bytes() == before
    with pytest.raises(AuditUnavailableError, match="no audit log"):
        SqliteStore.read_only(tmp_path / "missing.db").open("x")


def test_appends_fail_once_the_wal_is_deleted_under_the_writer(tmp_path: Path) -> None:
    """A deleted WAL (what the rogue checkpoint did) must turn appends into 503s, not ghost writes."""
    path = tmp_path / "audit.db"
    store = SqliteStore(path, preallocate_wal_bytes=0)
    store.open("log")
    prev = _append(store, 1, 3, genesis_hash("log"))
    Path(f"{path}-wal").unlink()
    with pytest.raises(AuditUnavailableError, match=r"audit\.db-wal is gone"):
        _append(store, 4, 1, prev)
    store.close()


def test_the_log_reports_its_problem_for_readiness(tmp_path: Path) -> None:
    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path)
        assert log.problem() == ""
        Path(tmp_path / "audit" / "audit.db-wal").unlink()
        assert "gone" in log.problem()
        with pytest.raises(AuditUnavailableError):
            await log.append(sample_event(1))
        await log.close()

    asyncio.run(go())


def _killed_writer(tmp_path: Path, num_records: int) -> None:
    """A writer process that appends and checkpoints, then dies by SIGKILL mid-life."""
    code = f"""
import asyncio, os, signal
from pathlib import Path
from audit.config import AuditConfig
from audit.log import AuditLog
from tests.audit_doubles import sample_event
async def go():
    log = await AuditLog.open(AuditConfig(checkpoint_every=4), Path({str(tmp_path)!r}))
    for i in range({num_records}):
        await log.append(sample_event(i))
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(go())
"""
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -signal.SIGKILL


def test_the_next_writer_verifies_and_records_an_unclean_stop(tmp_path: Path) -> None:
    _killed_writer(tmp_path, 10)  # service_start + 10: checkpoints at 4 and 8, records 9..11 unsealed

    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path)
        page = await log.search(AuditQuery(event_type="audit_recovery"))
        assert [r.event.detail for r in page.records] == ["records 9..11 after checkpoint 2 verified"]
        assert page.records[0].seq == 12
        assert (await log.verify()).ok
        await log.close()
        again = await AuditLog.open(AuditConfig(), tmp_path)  # a clean stop: nothing to recover
        assert (await again.search(AuditQuery(event_type="audit_recovery"))).records == page.records
        await again.close()

    asyncio.run(go())


def test_a_damaged_unsealed_tail_refuses_the_start(tmp_path: Path) -> None:
    _killed_writer(tmp_path, 10)
    db = sqlite3.connect(tmp_path / "audit" / "audit.db")
    db.execute("DROP TRIGGER audit_records_no_update")
    db.execute("UPDATE audit_records SET event = replace(event, 'req-9', 'req-X') WHERE seq = 11")
    db.commit()
    db.close()

    async def go() -> None:
        with pytest.raises(AuditIntegrityError, match="after checkpoint 2: record 11"):
            await AuditLog.open(AuditConfig(), tmp_path)
        # The refused start released the lock: a fixed log can be opened right away.
        store = SqliteStore(tmp_path / "audit" / "audit.db")
        store.open("x")
        store.close()

    asyncio.run(go())
