"""Admission against per-subject limits: reserve before the engine runs, settle after.

Peers count tokens after the response, so the request that crosses the limit is still served.
Here ``reserve`` books prompt + max_tokens up front and refuses a request that would not fit;
``settle`` refunds what was not used. Limits resolve per field: the subject's entry, else the most
generous of the caller's roles that sets the field, else the default.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import secrets
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics

from common.principal import Principal
from gateway.quota.backend import QuotaBackend, QuotaKeys, ResolvedLimits
from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.errors import MaxTokensCeilingError, QuotaExceededError, QuotaUnavailableError
from gateway.quota.lease_keeper import LeaseKeeper
from gateway.quota.memory_backend import MemoryQuotaBackend
from gateway.quota.quota_lease import QuotaLease, rate_limit_headers
from gateway.quota.quota_overrides import Kind, QuotaOverrides
from gateway.quota.redis_backend import RedisQuotaBackend
from gateway.quota.window_usage import Verdict, WindowUsage

__all__ = ["Quotas"]

_meter = metrics.get_meter("strongroom.quota")
_denials = _meter.create_counter("strongroom_quota_denials", description="Requests refused by a quota")
_unavailable = _meter.create_counter(
    "strongroom_quota_unavailable", description="Reservations that found the limiter unreachable"
)


class Quotas:
    def __init__(
        self,
        config: QuotaConfig | None = None,
        redis: Any | None = None,
        clock: Callable[[], float] = time.time,
        *,
        per_request: Any | None = None,
    ) -> None:
        """``per_request``: where reserve, release and renew go instead of ``redis`` (a
        ``gateway.redis_pipe.RedisPipe``); overrides always read through ``redis``."""
        self.config = config or QuotaConfig()
        self._clock = clock
        # Lease ids need only be unique among every replica's leases: a random per-process
        # prefix and a counter are, without a system call for randomness on every request.
        self._lease_prefix = secrets.token_hex(8)
        self._lease_numbers = itertools.count(1)
        self._backend: QuotaBackend = (
            MemoryQuotaBackend(clock) if redis is None else RedisQuotaBackend(per_request or redis)
        )
        self._keeper = LeaseKeeper(self._backend, lease_ttl_s=self.config.lease_ttl_s, clock=clock)
        self.overrides = QuotaOverrides(
            redis, key_prefix=self.config.key_prefix, refresh_s=self.config.overrides_refresh_s
        )

    def limits_for(self, principal: Principal) -> ResolvedLimits:
        """Per field: the subject's level, else the most generous role level setting it, else the
        default; each level an override (``quota_overrides``) over the configuration."""
        domain = principal.tenant or "*"
        own = self._level("user", principal.subject, domain, self.config.subjects)
        by_role = [self._level("role", r, domain, self.config.roles) for r in principal.roles]

        def pick(field: str) -> int:
            if own is not None and getattr(own, field) is not None:
                return int(getattr(own, field))
            values = [
                getattr(lv, field) for lv in by_role if lv is not None and getattr(lv, field) is not None
            ]
            return int(max(values)) if values else int(getattr(self.config.default, field))

        return ResolvedLimits(**{f: pick(f) for f in QuotaLimits.__struct_fields__})

    def every_tenant_limits(self, kind: Kind, name: str) -> ResolvedLimits:
        """What ``kind`` ``name`` gets before any tenant's override: its ``*`` override, else its
        configured entry, else the default, per field (the ceiling for a tenant's administrator)."""
        configured = self.config.subjects if kind == "user" else self.config.roles
        level = self._level(kind, name, "*", configured)

        def pick(field: str) -> int:
            value = getattr(level, field) if level is not None else None
            return int(value if value is not None else getattr(self.config.default, field))

        return ResolvedLimits(**{f: pick(f) for f in QuotaLimits.__struct_fields__})

    def _level(
        self, kind: Kind, name: str, domain: str, configured: dict[str, QuotaLimits]
    ) -> QuotaLimits | None:
        """One subject's or role's limits, field by field: tenant override, ``*`` override, config."""
        levels = [
            self.overrides.find(kind, name, domain) if domain != "*" else None,
            self.overrides.find(kind, name, "*"),
            configured.get(name),
        ]
        present = [lv for lv in levels if lv is not None]
        if not present:
            return None
        fields = {
            f: next((getattr(lv, f) for lv in present if getattr(lv, f) is not None), None)
            for f in QuotaLimits.__struct_fields__
        }
        return QuotaLimits(**fields)

    def _keys(self, principal: Principal, window: int) -> QuotaKeys:
        # Hash issuer + subject: any characters are safe, and the {tag} keeps one subject's keys in
        # one Redis Cluster slot so the script may touch them together.
        who = hashlib.sha256(f"{principal.issuer}\0{principal.subject}".encode()).hexdigest()[:32]
        base = f"{self.config.key_prefix}:{{{who}}}"
        return QuotaKeys(
            requests=f"{base}:req:{window}", tokens=f"{base}:tok:{window}", in_flight=f"{base}:inflight"
        )

    async def reserve(
        self, principal: Principal, model: str, requested_tokens: int, *, max_tokens: int | None = None
    ) -> QuotaLease:
        """Book one request and ``requested_tokens`` (prompt + max completion) for ``principal``.

        Raises QuotaExceededError (429; ``retryable`` False when the request alone is over a limit)
        or QuotaUnavailableError (503) when Redis is unreachable and ``fail_open`` is off.
        """
        await self.overrides.refresh()
        limits = self.limits_for(principal)
        now = self._clock()
        window_s = self.config.window_s
        window = math.floor(now / window_s)
        reset_s = (window + 1) * window_s - now
        if max_tokens is not None and max_tokens > limits.max_tokens_ceiling:
            self._deny("max_tokens")
            raise MaxTokensCeilingError(
                f"max_tokens {max_tokens} is above this caller's ceiling of {limits.max_tokens_ceiling}",
                limit="max_tokens",
                retry_after_s=0.0,
                retryable=False,
                param="max_tokens",
                limit_value=limits.max_tokens_ceiling,
            )
        if requested_tokens > limits.tokens_per_minute:
            self._deny("tokens")
            raise QuotaExceededError(
                f"the request needs {requested_tokens} tokens, more than the limit of "
                f"{limits.tokens_per_minute} per window; lower max_tokens or shorten the prompt",
                limit="tokens",
                retry_after_s=0.0,
                retryable=False,
                limit_value=limits.tokens_per_minute,
                reset_s=reset_s,
            )
        keys, lease_id = self._keys(principal, window), f"{self._lease_prefix}-{next(self._lease_numbers)}"
        try:
            usage = await self._backend.reserve(
                keys,
                limits,
                tokens=requested_tokens,
                lease_id=lease_id,
                now=now,
                window_ttl_s=window_s + reset_s,
                lease_ttl_s=self.config.lease_ttl_s,
            )
        except Exception as exc:
            _unavailable.add(1)
            self._keeper.abandon(keys.in_flight, lease_id)
            if not self.config.fail_open:
                raise QuotaUnavailableError("rate limiter unavailable") from exc
            empty = WindowUsage(verdict=Verdict.ADMITTED, requests=0, tokens=0, in_flight=0)
            return QuotaLease(
                None,
                keys,
                lease_id=lease_id,
                reserved_tokens=requested_tokens,
                limits=limits,
                usage=empty,
                reset_s=reset_s,
            )
        if usage.verdict is not Verdict.ADMITTED:
            raise self._exceeded(usage, limits, reset_s)
        self._keeper.hold(keys.in_flight, lease_id, now + self.config.lease_ttl_s)
        return QuotaLease(
            self._backend,
            keys,
            keeper=self._keeper,
            lease_id=lease_id,
            reserved_tokens=requested_tokens,
            limits=limits,
            usage=usage,
            reset_s=reset_s,
        )

    async def aclose(self) -> None:
        """Stop renewing and retrying (at shutdown; slots still held expire by their TTL)."""
        await self._keeper.aclose()

    def _exceeded(self, usage: WindowUsage, limits: ResolvedLimits, reset_s: float) -> QuotaExceededError:
        headers = rate_limit_headers(limits, usage, reset_s)
        if usage.verdict is Verdict.CONCURRENCY:
            self._deny("concurrency")
            return QuotaExceededError(
                f"too many requests in flight (limit {limits.concurrent_requests})",
                limit="concurrency",
                retry_after_s=1.0,
                retryable=True,
                rate_headers=headers,
                limit_value=limits.concurrent_requests,
                remaining=max(0, limits.concurrent_requests - usage.in_flight),
            )
        name = "requests" if usage.verdict is Verdict.REQUESTS else "tokens"
        self._deny(name)
        value, used = (
            (limits.requests_per_minute, usage.requests)
            if usage.verdict is Verdict.REQUESTS
            else (limits.tokens_per_minute, usage.tokens)
        )
        return QuotaExceededError(
            f"rate limit reached for {name} per minute; retry in {math.ceil(reset_s)} s",
            limit=name,
            retry_after_s=reset_s,
            retryable=True,
            rate_headers=headers,
            limit_value=value,
            remaining=max(0, value - used),
            reset_s=reset_s,
        )

    @staticmethod
    def _deny(limit: str) -> None:
        _denials.add(1, {"limit": limit})
