"""Counters in Redis, shared by every gateway replica; each step is one Lua script, so atomic.

The window and slot expiry use the gateway's clock passed as an argument (not Redis ``TIME``), so
tests can inject time; replicas' clocks should agree within a small part of the window (NTP).
"""

from __future__ import annotations

import math
from typing import Any

from gateway.quota.backend import QuotaKeys, ResolvedLimits
from gateway.quota.window_usage import Verdict, WindowUsage

__all__ = ["RedisQuotaBackend"]

# KEYS: requests counter, tokens counter, in-flight zset (score = slot expiry)
# ARGV: now, window ttl (s), rpm, tpm, concurrency, tokens, lease id, slot expiry, slot-set ttl (s)
_RESERVE = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local requests = tonumber(redis.call('GET', KEYS[1]) or '0')
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local in_flight = redis.call('ZCARD', KEYS[3])
local tokens = tonumber(ARGV[6])
local verdict = 0
if requests + 1 > tonumber(ARGV[3]) then verdict = 1
elseif used + tokens > tonumber(ARGV[4]) then verdict = 2
elseif in_flight + 1 > tonumber(ARGV[5]) then verdict = 3 end
if verdict == 0 then
  requests = redis.call('INCR', KEYS[1])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  used = redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
  redis.call('EXPIRE', KEYS[3], ARGV[9])
  in_flight = in_flight + 1
end
return {verdict, requests, used, in_flight}
"""

_ADJUST = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local v = redis.call('INCRBY', KEYS[1], ARGV[1])
  if v < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') end
end
return 0
"""


# KEYS: in-flight zset. ARGV: slot expiry, lease id, slot-set ttl (s). XX: never resurrect a slot
# that was released or expired meanwhile.
_RENEW = """
if redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[2]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 0
"""


class RedisQuotaBackend:
    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._reserve = redis.register_script(_RESERVE)
        self._adjust = redis.register_script(_ADJUST)
        self._renew = redis.register_script(_RENEW)

    async def reserve(
        self,
        keys: QuotaKeys,
        limits: ResolvedLimits,
        *,
        tokens: int,
        lease_id: str,
        now: float,
        window_ttl_s: float,
        lease_ttl_s: float,
    ) -> WindowUsage:
        args = [
            repr(now),
            math.ceil(window_ttl_s),
            limits.requests_per_minute,
            limits.tokens_per_minute,
            limits.concurrent_requests,
            tokens,
            lease_id,
            repr(now + lease_ttl_s),
            math.ceil(lease_ttl_s),
        ]
        verdict, requests, used, in_flight = await self._reserve(
            keys=[keys.requests, keys.tokens, keys.in_flight], args=args
        )
        return WindowUsage(
            verdict=Verdict(int(verdict)), requests=int(requests), tokens=int(used), in_flight=int(in_flight)
        )

    async def adjust_tokens(self, tokens_key: str, delta: int) -> None:
        await self._adjust(keys=[tokens_key], args=[delta])

    async def release(self, in_flight_key: str, lease_id: str) -> None:
        await self._redis.zrem(in_flight_key, lease_id)

    async def renew(self, in_flight_key: str, lease_id: str, *, expires_at: float, ttl_s: float) -> None:
        await self._renew(keys=[in_flight_key], args=[repr(expires_at), lease_id, math.ceil(ttl_s)])
