"""Revocations in a SQLite file, so the CLI and an embedded (Redis-less) server share them.

The file is ``<data_dir>/auth/revocations.db`` in WAL mode: the server reads while the CLI
writes. Calls run synchronously on the event loop on purpose: a primary-key lookup in WAL mode
takes microseconds, far less than a hop to a worker thread would.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["SqliteRevocations"]

# jti = NULL matches nothing, so a token without a jti is checked for its subject only.
_LOOKUP = (
    "SELECT (SELECT 1 FROM revoked_tokens WHERE jti = ? AND expires_at > ?),"
    " (SELECT before FROM revoked_subjects WHERE subject = ? AND expires_at > ?)"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS revoked_tokens (jti TEXT PRIMARY KEY, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS revoked_subjects (
    subject TEXT PRIMARY KEY, before REAL NOT NULL, expires_at REAL NOT NULL
);
"""


class SqliteRevocations:
    """``RevocationStore`` over one SQLite file; raises ``sqlite3.Error`` on failure."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():  # private before SQLite creates it: its -wal and -shm copy the mode
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        self._path = path
        self._db = sqlite3.connect(path, timeout=1.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"SqliteRevocations(path={str(self._path)!r})"

    async def add_token(self, jti: str, *, expires_at: float, now: float) -> None:
        with self._db:
            self._purge(now)
            self._db.execute(
                "INSERT INTO revoked_tokens VALUES (?, ?) ON CONFLICT (jti) "
                "DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
                (jti, expires_at),
            )

    async def add_subject(self, subject: str, *, before: float, expires_at: float, now: float) -> None:
        with self._db:
            self._purge(now)
            self._db.execute(
                "INSERT INTO revoked_subjects VALUES (?, ?, ?) ON CONFLICT (subject) DO UPDATE SET "
                "before = max(before, excluded.before), expires_at = max(expires_at, excluded.expires_at)",
                (subject, before, expires_at),
            )

    async def lookup(self, jti: str | None, subject: str, *, now: float) -> tuple[bool, float | None]:
        # One statement, one read transaction: each call into SQLite hands the GIL over, and
        # under load the audit writer thread may hold it for a while before handing it back.
        is_revoked, before = self._db.execute(_LOOKUP, (jti, now, subject, now)).fetchone()
        return is_revoked is not None, None if before is None else float(before)

    async def aclose(self) -> None:
        self._db.close()

    def _purge(self, now: float) -> None:
        self._db.execute("DELETE FROM revoked_tokens WHERE expires_at <= ?", (now,))
        self._db.execute("DELETE FROM revoked_subjects WHERE expires_at <= ?", (now,))
