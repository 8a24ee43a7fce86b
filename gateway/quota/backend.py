"""Where counters live: in this process, or in Redis for every replica at once.

Windows are fixed: window ``n`` covers ``[n * window_s, (n + 1) * window_s)`` of the injected
clock, and its counters reset when it ends. A fixed window is exact and cheap (two counters per
subject), at the known price that a subject can spend up to twice a limit across one window
boundary. Concurrency slots are a set of lease ids with an expiry, renewed while their request
runs (``LeaseKeeper``), so a slot whose holder died frees itself after ``lease_ttl_s``.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from gateway.quota.window_usage import WindowUsage

__all__ = ["QuotaBackend", "QuotaKeys", "ResolvedLimits"]


class QuotaKeys(msgspec.Struct, frozen=True, kw_only=True):
    requests: str
    tokens: str
    in_flight: str


class ResolvedLimits(msgspec.Struct, frozen=True, kw_only=True):
    requests_per_minute: int
    tokens_per_minute: int
    concurrent_requests: int
    max_tokens_ceiling: int


class QuotaBackend(Protocol):
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
        """Admit and count the request only if every limit still holds, all in one atomic step."""
        ...

    async def adjust_tokens(self, tokens_key: str, delta: int) -> None:
        """Add ``delta`` (negative: refund) to a window's token count, if that window still exists."""
        ...

    async def release(self, in_flight_key: str, lease_id: str) -> None:
        """Free the concurrency slot ``lease_id``; freeing a free slot does nothing."""
        ...

    async def renew(self, in_flight_key: str, lease_id: str, *, expires_at: float, ttl_s: float) -> None:
        """Move a held slot's expiry to ``expires_at``; a slot that is gone stays gone."""
        ...
