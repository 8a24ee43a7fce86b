"""A PostgreSQL witness: signed checkpoints in a table that only a separate role may write.

The gateway connects with ``witness_postgres_dsn`` as a role holding INSERT and SELECT on
``audit_witness`` only (``postgres_witness_role.sql``); neither the audit store's role nor its
owner has rights there, so truncating or restoring the store leaves the witness as it was.
Rows are never chained: the role cannot UPDATE or DELETE, and every row carries the
checkpoint's own signature, checked on read against the trusted key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import msgspec
import psycopg
from psycopg import sql

from audit.checkpoint import Checkpoint
from audit.postgres_store import _script
from audit.signer import CheckpointVerifier
from audit.witness import WitnessError

_PAGE = 1000
_NEWEST_ROWS = 16
"""Rows ``newest`` reads: gateways sharing the table may insert out of index order."""


def install_witness_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """As the witness table's owner: create it."""
    conn.execute(_script("postgres_witness_schema.sql", schema=schema))


def grant_witness_role(conn: psycopg.Connection[tuple[object, ...]], schema: str, role: str) -> None:
    """As the witness table's owner: let ``role`` INSERT and SELECT it, nothing else."""
    conn.execute(_script("postgres_witness_role.sql", schema=schema, role=role))


class PostgresWitness:
    def __init__(self, dsn: str, schema: str) -> None:
        self._dsn = dsn
        self._schema = schema
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def __repr__(self) -> str:
        return f"PostgresWitness(schema={self._schema!r}, dsn=<redacted>)"

    def _execute(self, query: sql.Composed, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=3)
                self._conn.execute("SET synchronous_commit = on")
                exists = self._conn.execute(
                    "SELECT to_regclass(%s)", (f"{self._schema}.audit_witness",)
                ).fetchone()
                if exists is None or exists[0] is None:
                    install_witness_schema(self._conn, self._schema)  # dev: production installs it as owner
            cur = self._conn.execute(query, params)
            return cur.fetchall() if cur.description is not None else []

    def _table(self) -> sql.Composed:
        return sql.SQL("{}.audit_witness").format(sql.Identifier(self._schema))

    def publish(self, checkpoint: Checkpoint) -> None:
        query = sql.SQL("INSERT INTO {} (log_id, idx, body) VALUES (%s, %s, %s)").format(self._table())
        body = msgspec.json.encode(checkpoint).decode()
        self._execute(query, (checkpoint.log_id, checkpoint.index, body))

    def witnessed(self, verifier: CheckpointVerifier, log_id: str) -> Iterator[Checkpoint]:
        query = sql.SQL("SELECT id, body FROM {} WHERE log_id = %s AND id > %s ORDER BY id LIMIT %s").format(
            self._table()
        )
        after: object = 0
        while True:
            try:
                rows = self._execute(query, (log_id, after, _PAGE))
            except psycopg.Error as exc:
                raise WitnessError(f"PostgreSQL witness unreadable: {type(exc).__name__}") from exc
            for row in rows:
                yield _checked(str(row[1]), verifier)
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]

    def newest(self, verifier: CheckpointVerifier) -> Checkpoint | None:
        query = sql.SQL("SELECT body FROM {} ORDER BY id DESC LIMIT %s").format(self._table())
        try:
            rows = self._execute(query, (_NEWEST_ROWS,))
        except psycopg.Error as exc:
            raise WitnessError(f"PostgreSQL witness unreadable: {type(exc).__name__}") from exc
        found = [_checked(str(row[0]), verifier) for row in rows]
        if not found:
            return None
        same_log = [cp for cp in found if cp.log_id == found[0].log_id]
        return max(same_log, key=lambda cp: cp.index)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _checked(body: str, verifier: CheckpointVerifier) -> Checkpoint:
    try:
        cp = msgspec.json.decode(body, type=Checkpoint)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WitnessError("PostgreSQL witness holds an unreadable row") from exc
    if not verifier.is_valid("checkpoint", cp.payload(), cp.signature):
        raise WitnessError(
            f"PostgreSQL witness row for checkpoint {cp.index} is not signed by the trusted key"
        )
    return cp
