"""PostgreSQL audit store: same tables and behaviour as SQLite.

The gateway connects as a role holding only INSERT and SELECT (``postgres_role.sql``); the
schema (``postgres_schema.sql``) is installed by its owner through ``install_schema``.
Durability comes from ``synchronous_commit = on``, forced per session.

Several gateways append to one chain: each batch is sealed inside a transaction that first takes
a transaction-scoped advisory lock named after the schema, then reads the head. The database
thus orders the writers (no UPDATE privilege needed, unlike a locked head row); the primary keys
on ``seq`` and ``idx`` remain the backstop against any writer that skips the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Sequence
from importlib import resources

import msgspec
import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from audit.checkpoint import Checkpoint
from audit.errors import AuditUnavailableError
from audit.query import AuditQuery, where_clause
from audit.record import RecordRow, genesis_hash
from audit.store import ArchiveEntry, SealBatch, StoreConflictError, StoreHead

_COLUMNS = "seq, time_us, event_type, decision, subject, tenant, model, roles, findings, event, content, prev_hash, hash"

_SELECT = "SELECT " + _COLUMNS + " FROM audit_records "  # noqa: S608 - constant columns

_INSERT = "INSERT INTO audit_records (" + _COLUMNS + ") VALUES "  # noqa: S608 - constant columns

_ROW = "(" + ",".join(["%s"] * 13) + ")"

_MAX_PARAMS = 65_535
"""The protocol's limit of bind parameters in one statement."""

_HEAD = (
    "SELECT r.seq, r.hash, (SELECT body FROM audit_checkpoints ORDER BY idx DESC LIMIT 1), a.last_seq, a.head"
    " FROM (SELECT 1) AS one"
    " LEFT JOIN (SELECT seq, hash FROM audit_records ORDER BY seq DESC LIMIT 1) AS r ON true"
    " LEFT JOIN (SELECT last_seq, head FROM audit_archives ORDER BY last_seq DESC LIMIT 1) AS a ON true"
)
"""The chain head, the newest checkpoint and the newest archive in one round trip."""


def writer_lock_key(schema: str) -> int:
    """The advisory lock that serializes appends to ``schema``'s chain (a signed 64-bit key)."""
    digest = hashlib.sha256(f"strongroom.audit.append\n{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _script(name: str, **identifiers: str) -> sql.Composed:
    text = resources.files("audit").joinpath(name).read_text()
    return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in identifiers.items()})


def install_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """As the schema owner: create the audit tables."""
    conn.execute(_script("postgres_schema.sql", schema=schema))


def grant_append_only(conn: psycopg.Connection[tuple[object, ...]], schema: str, role: str) -> None:
    """As the schema owner: let ``role`` INSERT and SELECT, nothing else."""
    conn.execute(_script("postgres_role.sql", schema=schema, role=role))


class PostgresStore:
    def __init__(self, dsn: str, schema: str) -> None:
        self._dsn = dsn
        self._schema = schema
        self._local = threading.local()
        self._connections: list[psycopg.Connection[tuple[object, ...]]] = []
        self._lock = threading.Lock()
        # BEGIN and the lock in one simple-protocol round trip; the key is ours, never input.
        self._begin_locked = f"BEGIN; SELECT pg_advisory_xact_lock({writer_lock_key(schema)})".encode()
        self._cached_log_id: str | None = None

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r}, dsn=<redacted>)"

    def _conn(self) -> psycopg.Connection[tuple[object, ...]]:
        conn: psycopg.Connection[tuple[object, ...]] | None = getattr(self._local, "conn", None)
        if conn is not None and (conn.closed or conn.broken):
            conn = None
        if conn is None:
            conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=3)
            conn.execute("SET synchronous_commit = on")
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(self._schema)))
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _rows(self, query: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        """A read; retried once on a fresh connection when the old one died (e.g. a server restart)."""
        for attempt in range(2):
            conn: psycopg.Connection[tuple[object, ...]] | None = None
            try:
                conn = self._conn()
                return conn.execute(query.encode(), params).fetchall()
            except psycopg.Error as exc:
                if attempt == 0 and conn is not None and conn.broken:
                    continue
                raise AuditUnavailableError(f"postgres audit store: {type(exc).__name__}") from exc
        raise AssertionError("unreachable")

    def open(self, new_log_id: str) -> StoreHead:
        try:
            conn = self._conn()
            exists = conn.execute("SELECT to_regclass(%s)", (f"{self._schema}.audit_records",)).fetchone()
            if exists is None or exists[0] is None:
                install_schema(conn, self._schema)
            conn.execute(
                "INSERT INTO audit_meta (key, value) VALUES ('log_id', %s) ON CONFLICT (key) DO NOTHING",
                (new_log_id,),
            )
        except psycopg.Error as exc:
            raise AuditUnavailableError(f"postgres audit store: {exc}") from exc
        return self.head()

    def head(self) -> StoreHead:
        log_id = self._log_id()
        return self._head_from(log_id, self._rows(_HEAD, ())[0])

    def _log_id(self) -> str:
        if self._cached_log_id is None:
            self._cached_log_id = str(
                self._rows("SELECT value FROM audit_meta WHERE key = 'log_id'", ())[0][0]
            )
        return self._cached_log_id

    @staticmethod
    def _head_from(log_id: str, found: tuple[object, ...]) -> StoreHead:
        seq, digest, body, archived_seq, archived_head = found
        checkpoint = msgspec.json.decode(str(body), type=Checkpoint) if body is not None else None
        if seq is not None:
            return StoreHead(log_id=log_id, seq=int(str(seq)), hash=str(digest), checkpoint=checkpoint)
        if archived_seq is not None:
            return StoreHead(
                log_id=log_id, seq=int(str(archived_seq)), hash=str(archived_head), checkpoint=checkpoint
            )
        return StoreHead(log_id=log_id, seq=0, hash=genesis_hash(log_id), checkpoint=checkpoint)

    def append_at_head(self, seal: SealBatch) -> None:
        """Three round trips: BEGIN with the lock, the head, then the insert pipelined with COMMIT.
        The lock is held for the last two (and the commit's flush), only while this batch goes in.
        """
        log_id = self._log_id()
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        try:
            conn = self._conn()
            conn.execute(self._begin_locked)
            found = conn.execute(_HEAD.encode()).fetchone()
            assert found is not None  # the query always yields one row
            rows, checkpoint = seal(self._head_from(log_id, found))
            with conn.pipeline():
                self._insert(conn, rows, checkpoint)
                conn.execute(b"COMMIT")
        except BaseException as exc:
            if (
                conn is not None
                and not conn.broken
                and conn.info.transaction_status != TransactionStatus.IDLE
            ):
                with contextlib.suppress(psycopg.Error):
                    conn.execute(b"ROLLBACK")
            if isinstance(exc, psycopg.errors.UniqueViolation):
                raise StoreConflictError(str(exc)) from exc
            if isinstance(exc, psycopg.Error):
                raise AuditUnavailableError(f"postgres audit store: {type(exc).__name__}") from exc
            raise

    def _insert(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        rows: Sequence[RecordRow],
        checkpoint: Checkpoint | None,
    ) -> None:
        with conn.cursor() as cur:
            if len(rows) * len(RecordRow._fields) > _MAX_PARAMS:
                cur.executemany((_INSERT + _ROW).encode(), rows)
            elif rows:
                cur.execute(
                    (_INSERT + ",".join([_ROW] * len(rows))).encode(), [v for row in rows for v in row]
                )
            if checkpoint is not None:
                cur.execute(
                    "INSERT INTO audit_checkpoints (idx, seq, body) VALUES (%s, %s, %s)",
                    (checkpoint.index, checkpoint.seq, msgspec.json.encode(checkpoint).decode()),
                )

    def append(self, rows: Sequence[RecordRow], checkpoint: Checkpoint | None) -> None:
        """One statement, so one round trip: in autocommit it is its own transaction (atomic,
        durable with synchronous_commit on); the checkpoint rides along in a data-modifying CTE."""
        params: list[object] = []
        head = ""
        if checkpoint is not None:
            head = "WITH checkpoint AS (INSERT INTO audit_checkpoints (idx, seq, body) VALUES (%s, %s, %s)) "
            params += [checkpoint.index, checkpoint.seq, msgspec.json.encode(checkpoint).decode()]
        if rows:
            query = head + _INSERT + ",".join([_ROW] * len(rows))
            params += [value for row in rows for value in row]
        else:
            query = head + "SELECT 1"
        if len(params) > _MAX_PARAMS:
            self._append_in_transaction(rows, checkpoint)
            return
        try:
            self._conn().execute(query.encode(), params)
        except psycopg.errors.UniqueViolation as exc:
            raise StoreConflictError(str(exc)) from exc
        except psycopg.Error as exc:
            raise AuditUnavailableError(f"postgres audit store: {type(exc).__name__}") from exc

    def _append_in_transaction(self, rows: Sequence[RecordRow], checkpoint: Checkpoint | None) -> None:
        """A batch too big for one statement's parameters (``max_batch`` above ~5,000)."""
        try:
            conn = self._conn()
            with conn.transaction():
                self._insert(conn, rows, checkpoint)
        except psycopg.errors.UniqueViolation as exc:
            raise StoreConflictError(str(exc)) from exc
        except psycopg.Error as exc:
            raise AuditUnavailableError(f"postgres audit store: {type(exc).__name__}") from exc

    def _select(self, tail: str, params: Sequence[object]) -> list[RecordRow]:
        found = self._rows(_SELECT + tail, params)
        return [RecordRow(*r) for r in found]  # type: ignore[arg-type]

    def rows(self, after_seq: int, limit: int) -> list[RecordRow]:
        return self._select("WHERE seq > %s ORDER BY seq LIMIT %s", (after_seq, limit))

    def tail(self, n: int) -> list[RecordRow]:
        return list(reversed(self._select("ORDER BY seq DESC LIMIT %s", (n,))))

    def get(self, seq: int) -> RecordRow | None:
        found = self._select("WHERE seq = %s", (seq,))
        return found[0] if found else None

    def search(self, query: AuditQuery, after_seq: int, limit: int) -> list[RecordRow]:
        where, params = where_clause(query, after_seq, "%s")
        return self._select("WHERE " + where + " ORDER BY seq LIMIT %s", [*params, limit])

    def checkpoints(self, after_index: int, limit: int) -> list[Checkpoint]:
        found = self._rows(
            "SELECT body FROM audit_checkpoints WHERE idx > %s ORDER BY idx LIMIT %s", (after_index, limit)
        )
        return [msgspec.json.decode(str(r[0]), type=Checkpoint) for r in found]

    def checkpoint_covering(self, seq: int) -> Checkpoint | None:
        found = self._rows("SELECT body FROM audit_checkpoints WHERE seq >= %s ORDER BY idx LIMIT 1", (seq,))
        return msgspec.json.decode(str(found[0][0]), type=Checkpoint) if found else None

    def archives(self) -> list[ArchiveEntry]:
        found = self._rows(
            "SELECT first_seq, last_seq, head, path, sha256 FROM audit_archives ORDER BY first_seq", ()
        )
        return [ArchiveEntry(*r) for r in found]  # type: ignore[arg-type]

    def prune(self, entry: ArchiveEntry) -> None:
        """Needs the schema owner's DSN: the append-only role cannot DELETE, by design."""
        conn = self._conn()
        with conn.transaction():
            conn.execute("DELETE FROM audit_records WHERE seq <= %s", (entry.last_seq,))
            conn.execute("INSERT INTO audit_archives VALUES (%s, %s, %s, %s, %s)", tuple(entry))

    def maintain(self) -> None:
        """Nothing to do: the server checkpoints its WAL itself."""

    def idle(self) -> None:
        """Nothing to do."""

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
