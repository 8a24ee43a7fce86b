"""The policy in PostgreSQL: one policy for every gateway replica, as in ``PolicyStore``.

Same tables and rules as the SQLite store. A change locks the version row (``FOR UPDATE``), so
changes made through different replicas at once are applied one after the other, each on the
state the previous one left; readers never wait (MVCC) and always see a whole change. Replicas
learn of a new version from the watcher: a NOTIFY on the store's channel, sent in the change's
transaction (so it arrives on commit), besides Redis and the version poll within 1 s.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence

import psycopg
from psycopg import sql

from common.audit_sink import AuditSink
from policies.errors import PolicyUnavailableError
from policies.policy import Assignment, Grant, Policy
from policies.policy_change import PolicyChange, apply_changes
from policies.policy_seal import PolicySeal
from policies.policy_store import PolicyStore, check_before_change, policy_from_rows, rule_row

__all__ = ["PostgresPolicyStore"]

_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.policy_version (
    id INTEGER PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL, seal TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS {schema}.policy_rule (
    ptype TEXT NOT NULL, v0 TEXT NOT NULL, v1 TEXT NOT NULL, v2 TEXT NOT NULL, v3 TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (ptype, v0, v1, v2, v3)
);
"""

_RULES = "SELECT ptype, v0, v1, v2, v3 FROM policy_rule"
_INSERT = "INSERT INTO policy_rule VALUES (%s, %s, %s, %s, %s)"
_DELETE = "DELETE FROM policy_rule WHERE ptype=%s AND v0=%s AND v1=%s AND v2=%s AND v3=%s"


def _setup_lock_key(schema: str) -> int:
    digest = hashlib.sha256(f"strongroom.policy.setup\n{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresPolicyStore:
    def __init__(self, dsn: str, schema: str, seed: Policy, seal: PolicySeal | None = None) -> None:
        """Open (creating and seeding with ``seed`` when new) the policy tables in ``schema``."""
        self._dsn = dsn
        self._schema = schema
        self._seal = seal
        self._lock = asyncio.Lock()
        self._reader: psycopg.Connection[tuple[object, ...]] | None = None
        self._channel = f"strongroom_policy_{schema}"
        self.opening_note = ""
        """What opening did that the audit log should hear of (a new store)."""
        try:
            conn = self._connect()
            try:
                with conn.transaction():  # two replicas starting at once create and seed once
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_setup_lock_key(schema),))
                    conn.execute(sql.SQL(_SCHEMA).format(schema=sql.Identifier(schema)))
                    if conn.execute("SELECT version FROM policy_version").fetchone() is None:
                        self._seed(conn, seed)
            finally:
                conn.close()
        except psycopg.Error as exc:
            raise PolicyUnavailableError(
                f"policy store (postgres schema {schema}) cannot be opened: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"PostgresPolicyStore(schema={self._schema!r}, dsn=<redacted>)"

    def _seed(self, conn: psycopg.Connection[tuple[object, ...]], seed: Policy) -> None:
        rules: list[Grant | Assignment] = [*seed.grants, *seed.assignments]
        with conn.cursor() as cur:
            cur.executemany(_INSERT, [rule_row(r) for r in rules])
        policy = Policy(version=1, grants=seed.grants, assignments=seed.assignments)
        stored_seal = self._seal.seal(policy) if self._seal is not None else ""
        conn.execute("INSERT INTO policy_version VALUES (1, 1, %s)", (stored_seal,))
        self.opening_note = f"policy store (postgres schema {self._schema}) created from the seed policy"

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=3)
        conn.execute("SET synchronous_commit = on")
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(self._schema)))
        return conn

    def _read_conn(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._reader is None or self._reader.closed or self._reader.broken:
            self._reader = self._connect()
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def changes(self) -> AsyncIterator[None]:
        return self._notifications()

    async def _notifications(self) -> AsyncIterator[None]:
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=3)
        async with conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            async for _ in conn.notifies():
                yield None

    def version(self) -> int:
        try:
            row = self._read_conn().execute("SELECT version FROM policy_version").fetchone()
        except psycopg.Error as exc:
            raise PolicyUnavailableError(f"policy store unreadable: {type(exc).__name__}") from exc
        return int(str(row[0])) if row else 0

    def load(self) -> Policy:
        """The whole policy at one version (one snapshot); PolicyTamperedError on a bad seal."""
        try:
            conn = self._read_conn()
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                found = conn.execute("SELECT version, seal FROM policy_version").fetchone()
                rows = conn.execute(_RULES).fetchall()
        except psycopg.Error as exc:
            raise PolicyUnavailableError(f"policy store unreadable: {type(exc).__name__}") from exc
        if found is None:
            raise PolicyUnavailableError("policy store holds no version")
        policy = policy_from_rows([[str(v) for v in r] for r in rows], int(str(found[0])))
        if self._seal is not None:
            self._seal.check(policy, str(found[1]))
        return policy

    async def apply(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        """As ``PolicyStore.apply``: all of ``changes``, audited once (here), or nothing."""
        async with self._lock:
            try:
                return await self._apply(changes, actor, audit)
            except psycopg.Error as exc:
                raise PolicyUnavailableError(f"policy change not applied: {type(exc).__name__}") from exc

    async def _apply(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=3)
        async with conn:
            await conn.execute("SET synchronous_commit = on")
            await conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(self._schema)))
            async with conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '10s'")
                found = await (
                    await conn.execute("SELECT version, seal FROM policy_version FOR UPDATE")
                ).fetchone()
                rows = await (await conn.execute(_RULES)).fetchall()
                if found is None:
                    raise PolicyUnavailableError("policy store holds no version")
                current = policy_from_rows([[str(v) for v in r] for r in rows], int(str(found[0])))
                await check_before_change(self._seal, current, str(found[1]), audit)
                updated = apply_changes(current, changes)
                await audit.append(PolicyStore.change_event(current, updated, changes, actor))
                async with conn.cursor() as cur:
                    for change in changes:
                        await cur.execute(_INSERT if change.adds else _DELETE, rule_row(change.rule))
                    new_seal = self._seal.seal(updated) if self._seal is not None else ""
                    await cur.execute(
                        "UPDATE policy_version SET version = %s, seal = %s", (updated.version, new_seal)
                    )
                    await cur.execute("SELECT pg_notify(%s, %s)", (self._channel, str(updated.version)))
        return updated
