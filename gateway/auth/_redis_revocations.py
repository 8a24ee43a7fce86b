"""Revocations in Redis: one key per entry, expiring with the entry (``EX``), shared by replicas.

Keys: ``<prefix>jti:<jti>`` -> ``1`` and ``<prefix>sub:<subject>`` -> cut-off time. A lookup is one
``MGET`` round trip. TTLs are computed from the caller's clock, not Redis's, so an injected clock
behaves the same against Redis as against SQLite.
"""

from __future__ import annotations

import math

from redis.asyncio import Redis

from gateway.redis_pipe import RedisPipe

__all__ = ["RedisRevocations"]

# Keep the later cut-off and the longer TTL, atomically, when two admins revoke the same subject.
_ADD_SUBJECT = """
local current = tonumber(redis.call('GET', KEYS[1]))
local before = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
if current and current >= before then
  if redis.call('TTL', KEYS[1]) < ttl then redis.call('EXPIRE', KEYS[1], ttl) end
  return 0
end
local remaining = redis.call('TTL', KEYS[1])
if remaining > ttl then ttl = remaining end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
return 1
"""


class RedisRevocations:
    """``RevocationStore`` over a ``redis.asyncio.Redis`` client or a ``RedisPipe``, owned by the caller."""

    def __init__(self, redis: Redis | RedisPipe, *, key_prefix: str) -> None:
        self._redis = redis
        self._prefix = key_prefix

    def __repr__(self) -> str:
        return f"RedisRevocations(key_prefix={self._prefix!r})"

    async def add_token(self, jti: str, *, expires_at: float, now: float) -> None:
        ttl = math.ceil(expires_at - now)
        if ttl > 0:
            await self._redis.set(self._jti_key(jti), "1", ex=ttl)

    async def add_subject(self, subject: str, *, before: float, expires_at: float, now: float) -> None:
        ttl = math.ceil(expires_at - now)
        if ttl > 0:
            await self._redis.eval(_ADD_SUBJECT, 1, self._subject_key(subject), repr(before), str(ttl))

    async def lookup(self, jti: str | None, subject: str, *, now: float) -> tuple[bool, float | None]:
        jti_key = self._jti_key(jti) if jti is not None else self._prefix + "jti-absent"
        token_entry, cutoff = await self._redis.mget(jti_key, self._subject_key(subject))
        return jti is not None and token_entry is not None, None if cutoff is None else float(cutoff)

    async def aclose(self) -> None:
        """The client belongs to the gateway; nothing to close here."""

    def _jti_key(self, jti: str) -> str:
        return f"{self._prefix}jti:{jti}"

    def _subject_key(self, subject: str) -> str:
        return f"{self._prefix}sub:{subject}"
