"""The policy on disk: SQLite, one row per rule plus a version that only ever grows.

A change runs in one ``BEGIN IMMEDIATE`` transaction: read the current policy, apply the batch in
memory, append the audit event, write the rules, bump the version, commit. Any failure on the way,
the audit append included, rolls everything back: a change is applied entirely, audited, or not at
all. Replicas on one host (or a shared volume) share the file; WAL mode lets them read while one
writes, and comparing versions tells each replica it is behind. With a ``PolicySeal`` the state
is signed with every change and checked on every read (see ``policy_seal.py``).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from audit.canonical import canonical_json
from common.audit_event import AuditEvent, Decision, EventType
from common.audit_sink import AuditSink
from policies.errors import PolicyTamperedError, PolicyUnavailableError
from policies.policy import Assignment, Grant, Policy
from policies.policy_change import PolicyChange, apply_changes
from policies.policy_seal import PolicySeal, tamper_event

__all__ = ["PolicyStore", "check_before_change", "policy_from_rows", "rule_row"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS policy_version (
    id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, seal TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS policy_rule (
    ptype TEXT NOT NULL, v0 TEXT NOT NULL, v1 TEXT NOT NULL, v2 TEXT NOT NULL, v3 TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (ptype, v0, v1, v2, v3)
);
"""


def rule_row(rule: Grant | Assignment) -> tuple[str, str, str, str, str]:
    line = rule.as_line()
    return (line[0], line[1], line[2], line[3], line[4] if len(line) == 5 else "")


def policy_from_rows(rows: Iterable[Sequence[str]], version: int) -> Policy:
    """The policy from ``(ptype, v0, v1, v2, v3)`` rows (``v3`` is empty for an assignment)."""
    return Policy.from_lines(
        ([r[0], r[1], r[2], r[3], r[4]] if r[0] == "p" else list(r[:4]) for r in rows), version
    )


class PolicyStore:
    def __init__(self, path: Path, seed: Policy, seal: PolicySeal | None = None) -> None:
        """Open (creating and seeding with ``seed`` when new) the policy database at ``path``.

        With ``seal``, every read checks the stored seal and every change writes a new one; a
        database from before seals existed is sealed as it stands, once, when first opened."""
        self.path = path
        self._seal = seal
        self.opening_note = ""
        """What opening did that the audit log should hear of (a new or a newly sealed store)."""
        # One change at a time per process: a second BEGIN IMMEDIATE would block the event loop
        # while the first change awaits its audit append on that same loop.
        self._lock = asyncio.Lock()
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():  # private before SQLite creates it: its -wal and -shm copy the mode
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            conn = self._connect()
            try:
                conn.executescript(_SCHEMA)
                columns = [r[1] for r in conn.execute("PRAGMA table_info(policy_version)")]
                is_unsealed = "seal" not in columns
                if is_unsealed:
                    conn.execute("ALTER TABLE policy_version ADD COLUMN seal TEXT NOT NULL DEFAULT ''")
            finally:
                conn.close()
            with self._transaction() as conn:
                if conn.execute("SELECT version FROM policy_version").fetchone() is None:
                    conn.executemany(
                        "INSERT INTO policy_rule VALUES (?, ?, ?, ?, ?)", map(rule_row, self._rules(seed))
                    )
                    conn.execute("INSERT INTO policy_version VALUES (1, 1, '')")
                    self.opening_note = f"policy store {path} created from the seed policy"
                    is_unsealed = True
                elif is_unsealed:
                    self.opening_note = f"policy store {path} had no seal; sealed as found"
                if is_unsealed and seal is not None:
                    conn.execute("UPDATE policy_version SET seal = ?", (seal.seal(self._read(conn)[0]),))
        except sqlite3.Error as exc:
            raise PolicyUnavailableError(f"policy store {path} cannot be opened: {exc}") from exc

    def close(self) -> None:
        """Nothing held: every read and change opens its own connection."""

    def changes(self) -> None:
        """No feed of its own: replicas sharing the file learn of changes by Redis and polling."""

    @staticmethod
    def _rules(policy: Policy) -> list[Grant | Assignment]:
        return [*policy.grants, *policy.assignments]

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def version(self) -> int:
        try:
            conn = self._connect()
            try:
                row = conn.execute("SELECT version FROM policy_version").fetchone()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise PolicyUnavailableError(f"policy store unreadable: {exc}") from exc
        return int(row[0]) if row else 0

    def load(self) -> Policy:
        """The whole policy and its version, read in one transaction (never a half-applied change);
        PolicyTamperedError when it does not match its seal."""
        try:
            conn = self._connect()
            try:
                conn.execute("BEGIN")
                policy, stored_seal = self._read(conn)
                conn.execute("COMMIT")
            finally:
                conn.close()
        except (sqlite3.Error, TypeError) as exc:
            raise PolicyUnavailableError(f"policy store unreadable: {exc}") from exc
        if self._seal is not None:
            self._seal.check(policy, stored_seal)
        return policy

    async def apply(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        """Apply ``changes`` atomically, audited as ``actor``; returns the new policy.

        Raises the policy errors of ``apply_changes`` (400/404/409), the audit sink's error when the
        event could not be made durable, or PolicyUnavailableError; in every case nothing changed.
        """
        async with self._lock:
            return await self._apply(changes, actor, audit)

    async def _apply(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        try:
            with self._transaction() as conn:
                current, stored_seal = self._read(conn)
                await check_before_change(self._seal, current, stored_seal, audit)
                updated = apply_changes(current, changes)
                await audit.append(self.change_event(current, updated, changes, actor))
                for change in changes:
                    sql = (
                        "INSERT INTO policy_rule VALUES (?, ?, ?, ?, ?)"
                        if change.adds
                        else "DELETE FROM policy_rule WHERE ptype=? AND v0=? AND v1=? AND v2=? AND v3=?"
                    )
                    conn.execute(sql, rule_row(change.rule))
                new_seal = self._seal.seal(updated) if self._seal is not None else ""
                conn.execute("UPDATE policy_version SET version = ?, seal = ?", (updated.version, new_seal))
        except sqlite3.Error as exc:
            raise PolicyUnavailableError(f"policy change not applied: {exc}") from exc
        return updated

    def _read(self, conn: sqlite3.Connection) -> tuple[Policy, str]:
        version, stored_seal = conn.execute("SELECT version, seal FROM policy_version").fetchone()
        rows = conn.execute("SELECT ptype, v0, v1, v2, v3 FROM policy_rule").fetchall()
        return policy_from_rows(rows, int(version)), str(stored_seal)

    @staticmethod
    def change_event(
        before: Policy, after: Policy, changes: Sequence[PolicyChange], actor: str
    ) -> AuditEvent:
        # before/after hold the touched rules as they were and are, not the whole policy: the
        # version pair pins the full states, which the store can reproduce.
        touched = [c.rule for c in changes]
        present = before.grants | before.assignments
        now = after.grants | after.assignments

        def state(policy: Policy, rules: frozenset[Grant | Assignment]) -> str:
            kept = sorted({", ".join(r.as_line()) for r in touched if r in rules})
            return canonical_json({"version": policy.version, "rules": kept}).decode("utf-8")

        return AuditEvent(
            event_type=EventType.ADMIN_CHANGE,
            decision=Decision.ALLOW,
            subject=actor,
            endpoint="policy",
            before=state(before, present),
            after=state(after, now),
            detail="; ".join(c.describe() for c in changes),
        )


async def check_before_change(
    seal: PolicySeal | None, current: Policy, stored_seal: str, audit: AuditSink
) -> None:
    """Refuse to build a change on a tampered state (that would launder the edit into a sealed
    version), and record the refusal."""
    if seal is None:
        return
    try:
        seal.check(current, stored_seal)
    except PolicyTamperedError as exc:
        await audit.append(tamper_event(exc, action="policy change refused"))
        raise
