"""SQLite store housekeeping: the WAL rewinds after a checkpoint instead of growing under load."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.record import encode_event, genesis_hash, seal_row
from audit.sqlite_store import SqliteStore
from audit.testing import sample_event


def _wal_frames(path: Path) -> int:
    """Frames in the WAL now (a passive checkpoint from a fresh connection reports them)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


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
    in_flight = sqlite3.connect(path, isolation_level=None)
    in_flight.execute("BEGIN IMMEDIATE")
    in_flight.execute("INSERT INTO audit_meta (key, value) VALUES ('in-flight', 'x')")
    reader = threading.Thread(target=store.maintain)  # as the log does: on the reader thread
    reader.start()
    reader.join()
    in_flight.execute("COMMIT")
    in_flight.close()
    _append_one_at_a_time(store, 101, 1, prev)  # copies the in-flight commit's frames, then rewinds
    assert _wal_frames(path) <= 8  # one commit's frames, not 101 commits' (about 400)
    store.close()


def test_a_short_wal_is_left_alone(tmp_path: Path) -> None:
    """Below ``rewind_at_frames`` the writer pays no stall: the WAL just keeps its frames."""
    path = tmp_path / "audit.db"
    store = SqliteStore(path, rewind_at_frames=10_000)
    store.open("log")
    prev = _append_one_at_a_time(store, 1, 50, genesis_hash("log"))
    in_flight = sqlite3.connect(path, isolation_level=None)
    in_flight.execute("BEGIN IMMEDIATE")
    in_flight.execute("INSERT INTO audit_meta (key, value) VALUES ('in-flight', 'x')")
    reader = threading.Thread(target=store.maintain)
    reader.start()
    reader.join()
    in_flight.execute("COMMIT")
    in_flight.close()
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


def test_the_wal_stays_bounded_under_a_steady_stream_of_appends(tmp_path: Path) -> None:
    async def go() -> int:
        store = SqliteStore(tmp_path / "audit" / "audit.db", rewind_at_frames=200)
        log = await AuditLog.open(AuditConfig(checkpoint_every=50), tmp_path, store=store, heartbeat=False)
        for i in range(600):
            await log.append(sample_event(i))
        size = (tmp_path / "audit" / "audit.db-wal").stat().st_size
        await log.close()
        return size

    # 600 single-record commits write ~2,400 frames (~10 MB); rewinding past 200 keeps ~1-2 MB.
    assert asyncio.run(go()) < 4_000_000
