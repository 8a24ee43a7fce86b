"""SQLite audit store: the embedded default.

Durability: WAL with ``synchronous=FULL``, so every commit fsyncs the WAL before returning.
``NORMAL`` would only fsync at WAL checkpoints and can lose the last commits on power loss,
which breaks "durable before the response". Group commit in the log shares one fsync among a
whole batch, which is what makes FULL affordable. WAL checkpoints run off the commit path, on
the log's maintenance thread (``maintain``), and keep the WAL rewinding so that commits
overwrite frames rather than grow the file; the WAL is preallocated when the store opens, so
that they overwrite from the first commit on (``_preallocate_wal``). Append-only: triggers
abort any UPDATE or DELETE; only ``prune`` (archiving, an operator action) lifts them inside
its own transaction.

One writer: the store opened for writing takes the ``WriterLock`` and holds it until it closes;
every other process opens it with ``SqliteStore.read_only`` (``mode=ro`` and ``query_only``), and
a read-only connection can neither checkpoint nor delete the WAL. The writer must never open and
close a second descriptor of the database: Linux drops every POSIX lock the process holds on a
file when any descriptor of it closes, and without its locks another process closing its last
connection checkpoints and deletes the WAL the writer is still appending to. The one extra
descriptor (for ``fdatasync``) is opened once and closed after the connections.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import msgspec

from audit.checkpoint import Checkpoint
from audit.errors import AuditUnavailableError
from audit.query import AuditQuery, where_clause
from audit.record import RecordRow, genesis_hash
from audit.store import ArchiveEntry, StoreConflictError, StoreHead
from audit.writer_lock import WriterLock

_log = logging.getLogger(__name__)

_COLUMNS = "seq, time_us, event_type, decision, subject, tenant, model, roles, findings, event, content, prev_hash, hash"

_SELECT = "SELECT " + _COLUMNS + " FROM audit_records"  # noqa: S608 - constant column list

_INSERT = "INSERT INTO audit_records (" + _COLUMNS + ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"  # noqa: S608

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audit_records (
    seq INTEGER PRIMARY KEY, time_us INTEGER NOT NULL, event_type TEXT NOT NULL,
    decision TEXT NOT NULL, subject TEXT NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL,
    roles TEXT NOT NULL, findings TEXT NOT NULL, event TEXT NOT NULL, content TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_records_time ON audit_records (time_us);
CREATE INDEX IF NOT EXISTS audit_records_subject ON audit_records (subject, seq);
CREATE INDEX IF NOT EXISTS audit_records_model ON audit_records (model, seq);
CREATE TABLE IF NOT EXISTS audit_checkpoints (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audit_archives (
    first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, head TEXT NOT NULL,
    path TEXT NOT NULL, sha256 TEXT NOT NULL);
"""

_GUARDED = ("audit_meta", "audit_records", "audit_checkpoints", "audit_archives")


def _guards() -> str:
    statements = []
    for table in _GUARDED:
        for verb in ("UPDATE", "DELETE"):
            statements.append(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, 'audit tables are append-only'); END;"
            )
    return "\n".join(statements)


_REWIND_AT_FRAMES = 8_192
"""WAL length (frames, ~32 MiB of 4 KiB pages) from which the writer rewinds it: it copies the last
frames and fsyncs the database when no append waits (``idle``). Shorter costs more
rewinds, longer more disk; the file keeps its size after a rewind, so later commits overwrite
rather than extend it either way."""

_PREALLOCATE_WAL_BYTES = 64 << 20
"""WAL size written (zeros) at open: the rewind length plus what a checkpoint interval adds before
the next ``maintain`` looks (1,000 single-record commits write ~5,000 frames, ~20 MiB)."""

_PREALLOCATE_SHARE_OF_FREE = 4
"""The WAL takes at most 1/4 of the free space at open, so a small volume keeps room for records."""

MIN_FREE_BYTES = 8 << 20
"""Below this much free space under the database the store refuses to open: a start-up that
would fail on its first appends (503 for every request) is better refused with one message."""

_REWIND_GRACE_S = 0.2
"""How long a due rewind waits for the writer to be idle before an append pays for it. Even many
closed-loop appenders leave the writer idle that often; a longer wait let the WAL outgrow its
preallocated size under load (the runs are in bench/BENCHMARKS.md)."""


class SqliteStore:
    def __init__(
        self,
        path: Path,
        *,
        rewind_at_frames: int = _REWIND_AT_FRAMES,
        preallocate_wal_bytes: int = _PREALLOCATE_WAL_BYTES,
        lock_wait_s: float = 0.0,
    ) -> None:
        self._path = path
        self._lock_wait_s = lock_wait_s
        self._rewind_at_frames = rewind_at_frames
        self._preallocate_wal_bytes = preallocate_wal_bytes
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._rewind_due_since: float | None = None
        """Set by ``maintain`` once the WAL is long, cleared by the writer's rewind."""
        self._num_backfilled = 0
        self._is_read_only = False
        self._writer_lock: WriterLock | None = None
        self._db_fd: int | None = None
        """The writer's own descriptor of the database (``fdatasync``), open until ``close``."""
        self._file_ids: dict[Path, tuple[int, int]] = {}
        """(st_dev, st_ino) of the database and WAL the writer opened: see ``check_files``."""

    @classmethod
    def read_only(cls, path: Path) -> SqliteStore:
        """A reader beside the writer (CLI): never writes, checkpoints or deletes anything."""
        store = cls(path, preallocate_wal_bytes=0)
        store._is_read_only = True
        return store

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r}{', read-only' if self._is_read_only else ''})"

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None and self._is_read_only:
            uri = f"file:{urllib.parse.quote(str(self._path))}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=5.0)
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=5.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            # WAL-to-database copies run in ``maintain`` on another thread, not inside a commit
            # (an automatic checkpoint there lengthened the p99 of the appends waiting on it).
            conn.execute("PRAGMA wal_autocheckpoint=0")
            # Never truncate the WAL after a rewind (the default, stated): it keeps its preallocated
            # size, so commits overwrite frames instead of growing the file again.
            conn.execute("PRAGMA journal_size_limit=-1")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def open(self, new_log_id: str) -> StoreHead:
        """As the writer: take the writer lock, create the files (0600 in 0700 folders) and schema."""
        if self._is_read_only:
            if not self._path.exists():
                raise AuditUnavailableError(f"no audit log at {self._path}")
            return self.head()
        free = require_free_space(self._path.parent)
        self._writer_lock = WriterLock.acquire(self._path, wait_s=self._lock_wait_s)
        try:
            # Created private before SQLite opens it: the -wal and -shm files get the same mode.
            self._db_fd = os.open(self._path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            conn = self._conn()
            conn.executescript(_SCHEMA + _guards())
            conn.execute("INSERT OR IGNORE INTO audit_meta (key, value) VALUES ('log_id', ?)", (new_log_id,))
            self._preallocate_wal(conn, min(self._preallocate_wal_bytes, free // _PREALLOCATE_SHARE_OF_FREE))
            wal = Path(f"{self._path}-wal")
            for path in (self._path, wal):
                st = path.stat()
                self._file_ids[path] = (st.st_dev, st.st_ino)
            return self.head()
        except BaseException:
            self.close()
            raise

    def check_files(self) -> None:
        """Raise unless the database and WAL on disk are still the files the writer appends to.

        Deleted or replaced underneath it (a rogue checkpoint-and-delete, a restore over a live
        log), the writer's commits would land in files nobody will ever read: every append must
        then fail (503), not succeed into a ghost.
        """
        for path, file_id in self._file_ids.items():
            try:
                st = os.stat(path)
            except OSError as exc:
                raise AuditUnavailableError(f"sqlite audit store: {path.name} is gone: {exc}") from exc
            if (st.st_dev, st.st_ino) != file_id:
                raise AuditUnavailableError(f"sqlite audit store: {path.name} was replaced under the writer")

    def _preallocate_wal(self, conn: sqlite3.Connection, target: int) -> None:
        """Extend the WAL with zeros up to ``target`` bytes and make that size durable.

        A commit that extends the file pays for journaling the new size in its fdatasync: on this
        VM's disk it costs far more than overwriting allocated blocks (``bench/audit/throughput.py
        --disk-floor``, figures in bench/BENCHMARKS.md). SQLite grows the
        WAL only by appending frames and keeps its size after a rewind, so without this the first
        tens of MiB after every start extend it. Zeros past the last frame are what SQLite's
        recovery already handles after a rewind (frames whose salt does not match end the log).
        Done under the write lock (BEGIN IMMEDIATE), so no connection appends frames meanwhile.
        Best effort: a failure (disk full, read-only) leaves a WAL that grows as it would anyway.
        """
        wal = Path(f"{self._path}-wal")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            _log.warning("audit WAL not preallocated: %s", exc)
            return
        try:
            size = wal.stat().st_size
            if size >= target:
                return
            # SQLite holds no lock on the WAL file itself, so this descriptor's close drops none.
            fd = os.open(wal, os.O_WRONLY | os.O_CLOEXEC)
            try:
                chunk = bytes(1 << 20)
                for offset in range(size, target, len(chunk)):
                    os.pwrite(fd, chunk[: target - offset], offset)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            _log.warning("audit WAL not preallocated: %s", exc)
        finally:
            conn.execute("ROLLBACK")

    def head(self) -> StoreHead:
        conn = self._conn()
        log_id = conn.execute("SELECT value FROM audit_meta WHERE key = 'log_id'").fetchone()[0]
        row = conn.execute("SELECT seq, hash FROM audit_records ORDER BY seq DESC LIMIT 1").fetchone()
        cp_row = conn.execute("SELECT body FROM audit_checkpoints ORDER BY idx DESC LIMIT 1").fetchone()
        checkpoint = None if cp_row is None else msgspec.json.decode(cp_row[0], type=Checkpoint)
        if row is None:
            archived = conn.execute(
                "SELECT last_seq, head FROM audit_archives ORDER BY last_seq DESC LIMIT 1"
            ).fetchone()
            seq, digest = (0, genesis_hash(log_id)) if archived is None else (archived[0], archived[1])
        else:
            seq, digest = row
        return StoreHead(log_id=log_id, seq=seq, hash=digest, checkpoint=checkpoint)

    def append(self, rows: Sequence[RecordRow], checkpoint: Checkpoint | None) -> None:
        if self._is_read_only:
            raise AuditUnavailableError("sqlite audit store opened read-only")
        conn = self._conn()
        if self._rewind_due_since is not None and time.monotonic() - self._rewind_due_since > _REWIND_GRACE_S:
            self._rewind(conn)  # never idle (saturated): this batch pays for it
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(_INSERT, rows)
                if checkpoint is not None:
                    conn.execute(
                        "INSERT INTO audit_checkpoints (idx, seq, body) VALUES (?, ?, ?)",
                        (checkpoint.index, checkpoint.seq, msgspec.json.encode(checkpoint).decode()),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.check_files()  # replaced before or during the commit: it went to a file nobody reads
        except sqlite3.IntegrityError as exc:
            raise StoreConflictError(str(exc)) from exc
        except sqlite3.Error as exc:
            raise AuditUnavailableError(f"sqlite audit store: {exc}") from exc

    def rows(self, after_seq: int, limit: int) -> list[RecordRow]:
        cur = self._conn().execute(_SELECT + " WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit))
        return [RecordRow(*r) for r in cur.fetchall()]

    def tail(self, n: int) -> list[RecordRow]:
        cur = self._conn().execute(_SELECT + " ORDER BY seq DESC LIMIT ?", (n,))
        return [RecordRow(*r) for r in reversed(cur.fetchall())]

    def get(self, seq: int) -> RecordRow | None:
        row = self._conn().execute(_SELECT + " WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else RecordRow(*row)

    def search(self, query: AuditQuery, after_seq: int, limit: int) -> list[RecordRow]:
        where, params = where_clause(query, after_seq, "?")
        cur = self._conn().execute(
            _SELECT + " WHERE " + where + " ORDER BY seq LIMIT ?",
            [*params, limit],
        )
        return [RecordRow(*r) for r in cur.fetchall()]

    def checkpoints(self, after_index: int, limit: int) -> list[Checkpoint]:
        cur = self._conn().execute(
            "SELECT body FROM audit_checkpoints WHERE idx > ? ORDER BY idx LIMIT ?", (after_index, limit)
        )
        return [msgspec.json.decode(r[0], type=Checkpoint) for r in cur.fetchall()]

    def checkpoint_covering(self, seq: int) -> Checkpoint | None:
        row = (
            self._conn()
            .execute("SELECT body FROM audit_checkpoints WHERE seq >= ? ORDER BY idx LIMIT 1", (seq,))
            .fetchone()
        )
        return None if row is None else msgspec.json.decode(row[0], type=Checkpoint)

    def archives(self) -> list[ArchiveEntry]:
        cur = self._conn().execute(
            "SELECT first_seq, last_seq, head, path, sha256 FROM audit_archives ORDER BY first_seq"
        )
        return [ArchiveEntry(*r) for r in cur.fetchall()]

    def prune(self, entry: ArchiveEntry) -> None:
        if self._is_read_only:
            raise AuditUnavailableError("sqlite audit store opened read-only")
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DROP TRIGGER audit_records_no_delete")
            conn.execute("DELETE FROM audit_records WHERE seq <= ?", (entry.last_seq,))
            conn.execute("INSERT INTO audit_archives VALUES (?, ?, ?, ?, ?)", tuple(entry))
            conn.execute(
                "CREATE TRIGGER audit_records_no_delete BEFORE DELETE ON audit_records "
                "BEGIN SELECT RAISE(ABORT, 'audit tables are append-only'); END"
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def maintain(self) -> None:
        """On the maintenance thread: a passive WAL checkpoint; once the WAL is long, ask for a rewind.

        SQLite rewinds the WAL to its start only when a write transaction begins with every frame
        copied into the database. Under steady load a checkpoint on another thread never gets
        there (a commit is nearly always in flight), so the WAL would grow for as long as the load
        lasts and every commit would extend the file: an fdatasync that must journal the new size,
        several times slower in the tail than overwriting frames already allocated. So this pass
        copies the bulk without blocking the writer, and flushes what it copied; once the WAL is
        long the writer copies the few frames committed meanwhile when no append is waiting
        (``idle``), which lets its next BEGIN rewind.
        """
        _busy, num_frames, num_copied = self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if num_copied > 0 and num_copied != self._num_backfilled:
            # SQLite syncs the database only when no commit landed during the checkpoint, which
            # under load is almost never: the copied pages stay dirty and the writer's rewind
            # would flush all of them (megabytes) while appends wait. Flush them here.
            self._sync_database()
        self._num_backfilled = num_copied
        if num_frames >= self._rewind_at_frames and self._rewind_due_since is None:
            self._rewind_due_since = time.monotonic()

    def idle(self) -> None:
        """On the writer thread when no append is waiting: rewind the WAL if ``maintain`` asked."""
        if self._rewind_due_since is not None:
            self._rewind(self._conn())

    def _sync_database(self) -> None:
        if self._db_fd is not None:  # never a fresh descriptor: its close would drop SQLite's locks
            os.fdatasync(self._db_fd)

    def _rewind(self, conn: sqlite3.Connection) -> None:
        """Copy the frames committed since the last checkpoint; the next BEGIN then rewinds.

        Busy (``maintain``'s checkpoint holds the lock: 1 in 6 rewinds under saturation) keeps
        the rewind due for the next idle moment instead of letting the WAL outgrow its file.
        """
        try:
            is_busy = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0]
        except sqlite3.Error:  # housekeeping only: a failure leaves a longer WAL until the next ask
            is_busy = False
        if not is_busy:
            self._rewind_due_since = None

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        if self._db_fd is not None:  # after the connections: nothing of SQLite's is left to drop
            os.close(self._db_fd)
            self._db_fd = None
        if self._writer_lock is not None:
            self._writer_lock.release()
            self._writer_lock = None


def require_free_space(directory: Path) -> int:
    """Create ``directory`` (0700) and return its free bytes; refuse below ``MIN_FREE_BYTES``."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise AuditUnavailableError(
            f"only {free >> 20} MiB free under {directory}: the audit log needs at least "
            f"{MIN_FREE_BYTES >> 20} MiB to start"
        )
    return free
