"""Sessions in PostgreSQL, for replicas that share the policy database (``access.backend =
"postgres"``) and no Redis.

One row per session in ``<schema>.console_session``, keyed by the cookie's SHA-256. A request is
one transaction: the row is deleted if a time-out has passed, else an ``UPDATE … RETURNING``
restarts its idle clock, so the check and the touch are atomic on the server and a session
another replica ended stays ended. Rows nobody came back to are deleted when a session is created.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from common.principal import Principal
from gateway.console.errors import SessionsUnavailableError
from gateway.console.language import text
from gateway.console.session_store import ConsoleSession, new_session, session_key

__all__ = ["PostgresSessions"]

_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.console_session (
    key TEXT PRIMARY KEY, principal TEXT NOT NULL, csrf_token TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL
);
"""
_TOUCH = """
UPDATE {schema}.console_session SET last_seen = %(now)s
WHERE key = %(key)s AND last_seen > %(now)s - %(idle)s AND created_at > %(now)s - %(absolute)s
RETURNING principal, csrf_token, created_at
"""
_END_EXPIRED = """
DELETE FROM {schema}.console_session
WHERE key = %(key)s AND (last_seen <= %(now)s - %(idle)s OR created_at <= %(now)s - %(absolute)s)
"""
_INSERT = "INSERT INTO {schema}.console_session VALUES (%s, %s, %s, %s, %s)"
_PURGE = "DELETE FROM {schema}.console_session WHERE last_seen <= %s OR created_at <= %s"
_DELETE = "DELETE FROM {schema}.console_session WHERE key = %s"


def _setup_lock_key(schema: str) -> int:
    digest = hashlib.sha256(f"strongroom.console.sessions\n{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresSessions:
    def __init__(
        self, dsn: str, *, schema: str, idle_s: float, absolute_s: float, clock: Callable[[], float]
    ) -> None:
        self._dsn = dsn
        self._schema = sql.Identifier(schema)
        self._lock_key = _setup_lock_key(schema)
        self._idle_s = idle_s
        self._absolute_s = absolute_s
        self._clock = clock
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return "PostgresSessions(dsn=<redacted>)"

    async def create(self, principal: Principal) -> tuple[str, ConsoleSession]:
        session_id, session = new_session(principal, self._clock())
        now = session.created_at
        row = (session_key(session_id), msgspec.json.encode(principal).decode(), session.csrf_token, now, now)
        await self._run(
            (_PURGE, (now - self._idle_s, now - self._absolute_s)),
            (_INSERT, row),
        )
        return session_id, session

    async def get(self, session_id: str | None) -> ConsoleSession | None:
        if not session_id:
            return None
        now = self._clock()
        params = {
            "key": session_key(session_id),
            "now": now,
            "idle": self._idle_s,
            "absolute": self._absolute_s,
        }
        found = await self._run((_END_EXPIRED, params), (_TOUCH, params))
        if found is None:
            return None
        principal, csrf_token, created_at = found
        try:
            who = msgspec.json.decode(principal, type=Principal)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return ConsoleSession(principal=who, csrf_token=csrf_token, created_at=created_at, last_seen=now)

    async def end(self, session_id: str | None) -> None:
        if session_id:
            await self._run((_DELETE, (session_key(session_id),)))

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _run(self, *statements: tuple[str, Any]) -> tuple[Any, ...] | None:
        """Run ``statements`` in one transaction; the last one's first row. One connection, one
        request at a time (a session check is a single indexed statement)."""
        async with self._lock:
            try:
                conn = await self._connection()
                async with conn.transaction():
                    cursor = None
                    for query, params in statements:
                        cursor = await conn.execute(sql.SQL(query).format(schema=self._schema), params)
                    return await cursor.fetchone() if cursor is not None and cursor.description else None
            except psycopg.Error as exc:
                await self.aclose()
                raise SessionsUnavailableError(text("the session store is unreachable")) from exc

    async def _connection(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=2)
            async with conn.transaction():  # replicas starting at once create the table once
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
                await conn.execute(sql.SQL(_SCHEMA).format(schema=self._schema))
            self._conn = conn
        return self._conn
