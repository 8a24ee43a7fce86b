"""The revocation list: tokens revoked by ``jti`` or by subject-before-time, checked on every verify.

Backed by Redis when the gateway has a client (shared by all replicas), else by a SQLite file
under ``<data_dir>/auth/`` (shared by the CLI and the embedded server). A store failure is counted
in ``strongroom.auth.revocation_store_errors`` and raised as ``RevocationUnavailableError``; the
verifier then denies, unless ``auth.revocation_fail_open`` says otherwise.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from opentelemetry import metrics
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.auth._redis_revocations import RedisRevocations
from gateway.auth._sqlite_revocations import SqliteRevocations
from gateway.auth.config import AuthConfig
from gateway.auth.errors import RevocationUnavailableError
from gateway.auth.revocation_store import RevocationStore
from gateway.redis_pipe import RedisPipe

__all__ = ["RevocationHit", "RevocationList"]

RevocationHit = Literal["jti", "subject"]
_STORE_ERRORS = (RedisError, sqlite3.Error, OSError)


class RevocationList:
    """Revoke tokens and ask whether a token is revoked."""

    def __init__(
        self,
        store: RevocationStore,
        *,
        max_lifetime_s: float,
        leeway_s: float,
        clock: Callable[[], float] = time.time,
        meter: metrics.Meter | None = None,
    ) -> None:
        self._store = store
        self._subject_entry_s = max_lifetime_s + leeway_s
        self._clock = clock
        meter = meter or metrics.get_meter("strongroom.auth")
        self._store_errors = meter.create_counter(
            "strongroom.auth.revocation_store_errors",
            description="Revocation store reads or writes that failed (Redis or SQLite unreachable)",
        )

    def __repr__(self) -> str:
        return f"RevocationList(store={self._store!r})"

    @classmethod
    def open(
        cls,
        cfg: AuthConfig,
        data_dir: Path | str,
        *,
        redis: Redis | RedisPipe | None,
        clock: Callable[[], float] = time.time,
        meter: metrics.Meter | None = None,
    ) -> RevocationList:
        """Redis-backed when ``redis`` is given, else ``<data_dir>/auth/revocations.db``."""
        store: RevocationStore
        if redis is not None:
            store = RedisRevocations(redis, key_prefix=cfg.revocation_key_prefix)
        else:
            try:
                store = SqliteRevocations(Path(data_dir) / "auth" / "revocations.db")
            except (sqlite3.Error, OSError) as exc:
                raise RevocationUnavailableError(f"cannot open revocation database: {exc}") from exc
        return cls(store, max_lifetime_s=cfg.max_lifetime_s, leeway_s=cfg.leeway_s, clock=clock, meter=meter)

    async def revoke_token(self, jti: str, *, expires_at: float) -> None:
        """Revoke one token until its ``exp`` (after which it is invalid anyway)."""
        if not jti:
            raise ValueError("jti must not be empty")
        try:
            await self._store.add_token(jti, expires_at=expires_at, now=self._clock())
        except _STORE_ERRORS as exc:
            raise self._unavailable(exc) from exc

    async def revoke_subject(self, subject: str, *, before: float) -> None:
        """Revoke every token of ``subject`` issued at or before ``before`` (a UNIX time)."""
        if not subject:
            raise ValueError("subject must not be empty")
        expires_at = before + self._subject_entry_s
        try:
            await self._store.add_subject(subject, before=before, expires_at=expires_at, now=self._clock())
        except _STORE_ERRORS as exc:
            raise self._unavailable(exc) from exc

    async def find(self, *, jti: str | None, subject: str, issued_at: float) -> RevocationHit | None:
        """Which revocation, if any, covers this token; raises ``RevocationUnavailableError``."""
        try:
            is_jti_revoked, cutoff = await self._store.lookup(jti, subject, now=self._clock())
        except _STORE_ERRORS as exc:
            raise self._unavailable(exc) from exc
        if is_jti_revoked:
            return "jti"
        if cutoff is not None and issued_at <= cutoff:
            return "subject"
        return None

    async def aclose(self) -> None:
        """Close what the list opened itself (the SQLite file; never the shared Redis client)."""
        await self._store.aclose()

    def _unavailable(self, exc: Exception) -> RevocationUnavailableError:
        self._store_errors.add(1, {"error": type(exc).__name__})
        return RevocationUnavailableError(f"revocation store failed: {type(exc).__name__}")
