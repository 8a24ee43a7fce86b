"""Console sessions: a random id in an HttpOnly cookie, everything else on the server.

A session ends on sign-out, after ``idle_s`` without a request, or ``absolute_s`` after sign-in,
whichever comes first; both are checked here on every request against the stored timestamps
(a store's own expiry, such as a Redis TTL, only cleans up). Ids are 256-bit random values; a
store is keyed by their SHA-256, so its contents (a memory dump, a Redis ``KEYS``) reveal no
usable cookie. Each session carries its own CSRF token, compared in constant time.

Where sessions live follows the gateway's shared state, so every replica accepts every other's
cookie and a sign-out on one ends the session on all: in Redis when ``redis_url`` is set (like
quotas and revocations); else in PostgreSQL when the policy lives there (``access.backend =
"postgres"``, the database the replicas already share); else in this process's memory (one
process; a restart signs everybody out).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from common.principal import Principal

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.console.config import ConsoleConfig

__all__ = ["ConsoleSession", "SessionStore", "new_session", "open_session_store", "session_key"]


class ConsoleSession(msgspec.Struct, kw_only=True):
    """One signed-in officer. The cookie value is not kept; repr shows no secret."""

    principal: Principal
    csrf_token: str
    created_at: float
    last_seen: float

    def __repr__(self) -> str:
        return f"ConsoleSession(subject={self.principal.subject!r}, created_at={self.created_at})"

    def seconds_left(self, now: float, *, idle_s: float, absolute_s: float) -> float:
        """Until the first time-out ends the session; zero or less: it has ended."""
        return min(self.last_seen + idle_s, self.created_at + absolute_s) - now


class SessionStore(Protocol):
    async def create(self, principal: Principal) -> tuple[str, ConsoleSession]:
        """A new session for ``principal``: the cookie value (returned once) and the session."""
        ...

    async def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session for a cookie value, its idle clock restarted; None if absent or ended.
        Raises ``SessionsUnavailableError`` when the store cannot be reached (fail closed)."""
        ...

    async def end(self, session_id: str | None) -> None: ...

    async def aclose(self) -> None:
        """Release what the store holds of its own (not a Redis client it was given)."""
        ...


def new_session(principal: Principal, now: float) -> tuple[str, ConsoleSession]:
    session = ConsoleSession(
        principal=principal, csrf_token=secrets.token_urlsafe(32), created_at=now, last_seen=now
    )
    return secrets.token_urlsafe(32), session


def session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session_store(
    cfg: ConsoleConfig,
    redis: Redis | None,
    clock: Callable[[], float],
    *,
    postgres_dsn: str | None = None,
) -> SessionStore:
    """Redis when the gateway has it, else PostgreSQL at ``postgres_dsn`` (the shared policy
    database), else this process's memory."""
    from gateway.console.memory_sessions import MemorySessions
    from gateway.console.postgres_sessions import PostgresSessions
    from gateway.console.redis_sessions import RedisSessions

    if redis is not None:
        return RedisSessions(
            redis,
            key_prefix=cfg.session_key_prefix,
            idle_s=cfg.session_idle_s,
            absolute_s=cfg.session_absolute_s,
            clock=clock,
        )
    if postgres_dsn is not None:
        return PostgresSessions(
            postgres_dsn,
            schema=cfg.session_postgres_schema,
            idle_s=cfg.session_idle_s,
            absolute_s=cfg.session_absolute_s,
            clock=clock,
        )
    return MemorySessions(
        idle_s=cfg.session_idle_s,
        absolute_s=cfg.session_absolute_s,
        max_sessions=cfg.max_sessions,
        clock=clock,
    )
