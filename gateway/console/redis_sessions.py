"""Sessions in Redis, shared by every gateway replica on it.

One key per session, ``<prefix>:<sha256(cookie)>``, holding the session as JSON. A request reads
it, checks both time-outs against the stored timestamps, and writes ``last_seen`` back with
``SET XX``: a session another replica has just ended is not brought back. The key's TTL follows
the time left, so Redis drops sessions nobody returns to; it is housekeeping, not the check.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from common.principal import Principal
from gateway.console.errors import SessionsUnavailableError
from gateway.console.language import text
from gateway.console.session_store import ConsoleSession, new_session, session_key

__all__ = ["RedisSessions"]


class RedisSessions:
    def __init__(
        self, redis: Redis, *, key_prefix: str, idle_s: float, absolute_s: float, clock: Callable[[], float]
    ) -> None:
        self._redis = redis
        self._prefix = key_prefix
        self._idle_s = idle_s
        self._absolute_s = absolute_s
        self._clock = clock

    async def create(self, principal: Principal) -> tuple[str, ConsoleSession]:
        session_id, session = new_session(principal, self._clock())
        try:
            await self._redis.set(self._key(session_id), msgspec.json.encode(session), ex=self._ttl(session))
        except RedisError as exc:
            raise SessionsUnavailableError(text("the session store is unreachable")) from exc
        return session_id, session

    async def get(self, session_id: str | None) -> ConsoleSession | None:
        if not session_id:
            return None
        key = self._key(session_id)
        try:
            raw = await self._redis.get(key)
            if raw is None:
                return None
            session = msgspec.json.decode(raw, type=ConsoleSession)
            now = self._clock()
            if self._left(session, now) <= 0:
                await self._redis.delete(key)
                return None
            session.last_seen = now
            if not await self._redis.set(key, msgspec.json.encode(session), ex=self._ttl(session), xx=True):
                return None  # ended by another replica since the read
        except RedisError as exc:
            raise SessionsUnavailableError(text("the session store is unreachable")) from exc
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return session

    async def end(self, session_id: str | None) -> None:
        if not session_id:
            return
        try:
            await self._redis.delete(self._key(session_id))
        except RedisError as exc:
            raise SessionsUnavailableError(text("the session store is unreachable")) from exc

    async def aclose(self) -> None:
        """The Redis client is the gateway's; nothing of the store's own to release."""

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}:{session_key(session_id)}"

    def _left(self, session: ConsoleSession, now: float) -> float:
        return session.seconds_left(now, idle_s=self._idle_s, absolute_s=self._absolute_s)

    def _ttl(self, session: ConsoleSession) -> int:
        return max(1, math.ceil(self._left(session, session.last_seen)))
