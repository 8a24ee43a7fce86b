"""Counters in this process: the embedded default, exact for one gateway process."""

from __future__ import annotations

from collections.abc import Callable

from gateway.quota.backend import QuotaKeys, ResolvedLimits
from gateway.quota.window_usage import Verdict, WindowUsage

__all__ = ["MemoryQuotaBackend"]


class MemoryQuotaBackend:
    """Every method runs without awaiting anything, so on one event loop each is atomic."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._counters: dict[str, tuple[int, float]] = {}
        """key -> (value, expires_at)"""
        self._slots: dict[str, dict[str, float]] = {}
        """in-flight key -> {lease id: expires_at}"""

    def _get(self, key: str, now: float) -> int:
        value, expires_at = self._counters.get(key, (0, 0.0))
        if expires_at <= now:
            self._counters.pop(key, None)
            return 0
        return value

    def _expire(self, now: float) -> None:
        # Bound memory: drop windows that ended, as Redis's EXPIRE would.
        if len(self._counters) > 10_000:
            self._counters = {k: v for k, v in self._counters.items() if v[1] > now}

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
        self._expire(now)
        slots = {k: exp for k, exp in self._slots.get(keys.in_flight, {}).items() if exp > now}
        self._slots[keys.in_flight] = slots
        requests, used = self._get(keys.requests, now), self._get(keys.tokens, now)
        verdict = Verdict.ADMITTED
        if requests + 1 > limits.requests_per_minute:
            verdict = Verdict.REQUESTS
        elif used + tokens > limits.tokens_per_minute:
            verdict = Verdict.TOKENS
        elif len(slots) + 1 > limits.concurrent_requests:
            verdict = Verdict.CONCURRENCY
        if verdict is Verdict.ADMITTED:
            requests, used = requests + 1, used + tokens
            self._counters[keys.requests] = (requests, now + window_ttl_s)
            self._counters[keys.tokens] = (used, now + window_ttl_s)
            slots[lease_id] = now + lease_ttl_s
        return WindowUsage(verdict=verdict, requests=requests, tokens=used, in_flight=len(slots))

    async def adjust_tokens(self, tokens_key: str, delta: int) -> None:
        entry = self._counters.get(tokens_key)
        if entry is not None and entry[1] > self._clock():
            self._counters[tokens_key] = (max(0, entry[0] + delta), entry[1])

    async def release(self, in_flight_key: str, lease_id: str) -> None:
        self._slots.get(in_flight_key, {}).pop(lease_id, None)

    async def renew(self, in_flight_key: str, lease_id: str, *, expires_at: float, ttl_s: float) -> None:
        slots = self._slots.get(in_flight_key, {})
        if lease_id in slots:
            slots[lease_id] = expires_at
