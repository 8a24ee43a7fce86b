"""An admitted request's hold on its quota: tokens reserved up front, one concurrency slot."""

from __future__ import annotations

import logging
from types import TracebackType

from gateway.quota.backend import QuotaBackend, QuotaKeys, ResolvedLimits
from gateway.quota.lease_keeper import LeaseKeeper
from gateway.quota.window_usage import WindowUsage

__all__ = ["QuotaLease", "rate_limit_headers"]

log = logging.getLogger("strongroom.quota")


def format_reset(seconds: float) -> str:
    """OpenAI's duration style for x-ratelimit-reset-*: ``20ms``, ``1.5s``, ``6m0s``."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes:
        return f"{int(minutes)}m{round(rest)}s"
    return f"{round(rest, 3):g}s"


def rate_limit_headers(limits: ResolvedLimits, usage: WindowUsage, reset_s: float) -> dict[str, str]:
    reset = format_reset(reset_s)
    return {
        "x-ratelimit-limit-requests": str(limits.requests_per_minute),
        "x-ratelimit-remaining-requests": str(max(0, limits.requests_per_minute - usage.requests)),
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": str(limits.tokens_per_minute),
        "x-ratelimit-remaining-tokens": str(max(0, limits.tokens_per_minute - usage.tokens)),
        "x-ratelimit-reset-tokens": reset,
    }


class QuotaLease:
    """Settle once with the real usage; release once (also on disconnect). Both are idempotent,
    and neither raises: the response is already on its way. The slot is renewed while held and a
    release the limiter missed is retried (``LeaseKeeper``)."""

    def __init__(
        self,
        backend: QuotaBackend | None,
        keys: QuotaKeys,
        *,
        keeper: LeaseKeeper | None = None,
        lease_id: str,
        reserved_tokens: int,
        limits: ResolvedLimits,
        usage: WindowUsage,
        reset_s: float,
    ) -> None:
        self._backend = backend
        self._keeper = keeper
        self._keys = keys
        self.lease_id = lease_id
        self.reserved_tokens = reserved_tokens
        self.limits = limits
        self.usage = usage
        self.reset_s = reset_s
        self.settled = False
        self.released = False

    @property
    def headers(self) -> dict[str, str]:
        """x-ratelimit-* values for the successful response."""
        return rate_limit_headers(self.limits, self.usage, self.reset_s)

    async def settle(self, actual_total_tokens: int) -> None:
        """Charge what the request really used (prompt + completion), refunding the rest."""
        if self.settled:
            return
        self.settled = True
        delta = max(0, actual_total_tokens) - self.reserved_tokens
        if delta and self._backend is not None:
            try:
                await self._backend.adjust_tokens(self._keys.tokens, delta)
            except Exception as exc:  # the limiter is down: the reservation stands, which is safe
                log.warning("quota settle failed for lease %s: %s", self.lease_id, exc)

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self._keeper is not None:
            await self._keeper.release(self._keys.in_flight, self.lease_id)

    async def __aenter__(self) -> QuotaLease:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"QuotaLease(id={self.lease_id}, reserved_tokens={self.reserved_tokens}, settled={self.settled}, released={self.released})"
