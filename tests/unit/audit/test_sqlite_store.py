"""SQLite store housekeeping: the WAL is preallocated, and rewinds after a checkpoint instead of
growing under load, at a moment when no append waits."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.record import encode_event, genesis_hash, seal_row
from audit.sqlite_store import SqliteStore
from tests.audit_doubles import sample_event


def _wal_frames(path: Path) -> int:
    """Frames in the WAL now (a passive checkpoint from a fresh connection reports them)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def _maintain_while_a_commit_is_in_flight(store: SqliteStore, path: Path) -> None:
    """``maintain`` on another thread (as the log runs it) while another connection holds a commit
    open, so the checkpoint cannot copy that commit's frames; then the commit completes."""
    in_flight = sqlite3.connect(path, isolation_level=None)
    in_flight.execute("BEGIN IMMEDIATE")
    in_flight.execute("INSERT INTO audit_meta (key, value) VALUES ('in-flight', 'x')")
    reader = threading.Thread(target=store.maintain)
    reader.start()
    reader.join()
    in_flight.execute("COMMIT")
    in_flight.close()


def _append_one_at_a_time(store: SqliteStore, first: int, n: int, prev: str) -> str:
    for seq in range(first, first + n):
        row = seal_row(encode_event(sample_event(seq), 1_000_000 * seq), seq, prev, None)
        store.append([row], None)
        prev = row.hash
    return prev


def test_the_writer_finishes_a_checkpoint_so_the_wal_rewinds(tmp_path: Path) -> None:
    """Under load a commit is in flight while the reader's checkpoint runs: its frames are not
    copied, so the following BEGIN could not rewind and the WAL would keep growing."""
    path = tmp_path / "audit.db"
    store = SqliteStore(path, rewind_at_frames=100)
    store.open("log")
    prev = _append_one_at_a_time(store, 1, 100, genesis_hash("log"))
    _maintain_while_a_commit_is_in_flight(store, path)
    store.idle()  # as the writer does before it waits for appends: copies the in-flight commit's frames
    _append_one_at_a_time(store, 101, 1, prev)  # so this BEGIN rewinds
    assert _wal_frames(path) <= 8  # one commit's frames, not 101 commits' (about 400)
    store.close()


def test_a_due_rewind_waits_for_an_idle_writer_unless_it_never_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append does not pay for the rewind while the writer may still find an idle moment; a
    writer that never idles (saturated) pays for it after ``_REWIND_GRACE_S`` so the WAL stays bounded."""
    import audit.sqlite_store as sqlite_store

    path = tmp_path / "audit.db"
    store = SqliteStore(path, rewind_at_frames=100)
    store.open("log")
    prev = _append_one_at_a_time(store, 1, 100, genesis_hash("log"))
    _maintain_while_a_commit_is_in_flight(store, path)
    prev = _append_one_at_a_time(store, 101, 1, prev)  # within the grace period: no rewind
    assert _wal_frames(path) >= 100
    monkeypatch.setattr(sqlite_store, "_REWIND_GRACE_S", 0.0)
    time.sleep(0.01)
    _append_one_at_a_time(store, 102, 2, prev)  # never idle: the append finishes the checkpoint
    assert _wal_frames(path) <= 8
    store.close()


def test_maintain_flushes_the_pages_its_checkpoint_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite leaves them dirty when a commit landed during the checkpoint; the writer's rewind
    would then flush them while appends wait. A pass that copied nothing flushes nothing."""
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def counting_fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    store = SqliteStore(tmp_path / "audit.db")
    store.open("log")
    _append_one_at_a_time(store, 1, 20, genesis_hash("log"))
    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
    store.maintain()
    assert len(synced) == 1
    store.maintain()
    assert len(synced) == 1
    store.close()


def test_the_wal_is_preallocated_and_a_crash_image_recovers_every_commit(tmp_path: Path) -> None:
    """Zeros past the last frame end SQLite's recovery like stale frames after a rewind do."""
    path = tmp_path / "live" / "audit.db"
    store = SqliteStore(path, preallocate_wal_bytes=2 << 20)
    head = store.open("log")
    assert os.path.getsize(f"{path}-wal") == 2 << 20
    last = _append_one_at_a_time(store, 1, 50, head.hash)
    crash = tmp_path / "crash"
    crash.mkdir()
    for name in ("audit.db", "audit.db-wal"):  # what a power cut leaves: no -shm, WAL not checkpointed
        shutil.copyfile(path.parent / name, crash / name)
    assert os.path.getsize(crash / "audit.db-wal") == 2 << 20
    store.close()
    recovered = SqliteStore(crash / "audit.db", preallocate_wal_bytes=0)
    assert recovered.open("other") == (head.log_id, 50, last, None)
    assert [row.seq for row in recovered.rows(0, 100)] == list(range(1, 51))
    recovered.close()


def test_a_wal_that_cannot_be_preallocated_is_left_to_grow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def disk_full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device")

    path = tmp_path / "audit.db"
    store = SqliteStore(path, preallocate_wal_bytes=1 << 20)
    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", disk_full)
        head = store.open("log")
    assert "audit WAL not preallocated" in caplog.text
    assert os.path.getsize(f"{path}-wal") < 1 << 20
    _append_one_at_a_time(store, 1, 3, head.hash)
    assert store.head().seq == 3
    store.close()


def test_a_short_wal_is_left_alone(tmp_path: Path) -> None:
    """Below ``rewind_at_frames`` the writer pays no stall: the WAL just keeps its frames."""
    path = tmp_path / "audit.db"
    store = SqliteStore(path, rewind_at_frames=10_000)
    store.open("log")
    prev = _append_one_at_a_time(store, 1, 50, genesis_hash("log"))
    _maintain_while_a_commit_is_in_flight(store, path)
    store.idle()
    _append_one_at_a_time(store, 51, 1, prev)
    assert _wal_frames(path) >= 150
    store.close()


def test_without_maintenance_the_wal_only_grows(tmp_path: Path) -> None:
    """The control for the test above: commits alone never rewind (wal_autocheckpoint is off)."""
    path = tmp_path / "audit.db"
    store = SqliteStore(path)
    store.open("log")
    _append_one_at_a_time(store, 1, 100, genesis_hash("log"))
    assert _wal_frames(path) >= 200
    store.close()


@pytest.mark.parametrize("preallocate", [0, 4 << 20])
def test_the_wal_stays_bounded_under_a_steady_stream_of_appends(tmp_path: Path, preallocate: int) -> None:
    async def go() -> int:
        store = SqliteStore(
            tmp_path / "audit" / "audit.db", rewind_at_frames=200, preallocate_wal_bytes=preallocate
        )
        log = await AuditLog.open(AuditConfig(checkpoint_every=50), tmp_path, store=store, heartbeat=False)
        for i in range(600):
            await log.append(sample_event(i))  # the writer idles between them: it rewinds there
        size = (tmp_path / "audit" / "audit.db-wal").stat().st_size
        await log.close()
        return size

    # 600 single-record commits write ~3,000 frames (~12 MB); rewinding past 200 keeps ~1-2 MB,
    # and a preallocated WAL longer than that keeps exactly its size.
    size = asyncio.run(go())
    if preallocate:
        assert size == preallocate
    else:
        assert size < 4_000_000


class _CountingStore(SqliteStore):
    """Counts the writer's ``idle`` calls and the statements its connections run."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.num_idle = 0
        self.statements: list[str] = []

    def _conn(self) -> sqlite3.Connection:
        conn = super()._conn()
        conn.set_trace_callback(self.statements.append)
        return conn

    def idle(self) -> None:
        self.num_idle += 1
        super().idle()


def test_at_low_load_the_idle_writer_runs_no_checkpoint_between_appends(tmp_path: Path) -> None:
    """One append at a time: the writer idles between commits, but below the rewind length that
    runs no WAL checkpoint (nor its syncs), so no append waits behind housekeeping
    (bench/BENCHMARKS.md, "Audit append at low load"). How often it idles depends on the
    scheduler: an append queued before the writer looks again skips the idle (58 of 100 in a
    loaded CI-like run)."""

    async def go() -> _CountingStore:
        store = _CountingStore(tmp_path / "audit" / "audit.db")
        log = await AuditLog.open(
            AuditConfig(), tmp_path, store=store, heartbeat=False, record_lifecycle=False
        )
        store.statements.clear()
        for i in range(100):
            await log.append(sample_event(i))
        statements = list(store.statements)
        await log.close()
        store.statements = statements
        return store

    store = asyncio.run(go())
    assert store.statements.count("COMMIT") == 100
    assert store.num_idle > 0
    assert not [s for s in store.statements if "wal_checkpoint" in s]
