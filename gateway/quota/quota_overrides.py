"""Quota overrides set by administrators at run time, on top of the ``[quota]`` configuration.

An override gives one role or one user (a token ``sub``) its own limits in one domain: ``*``
(every caller) or a tenant (callers whose token carries that tenant). Fields left unset fall
through, so for each field the order is::

    user override (caller's tenant) > user override (*) > quota.subjects
        then, per role: role override (caller's tenant) > role override (*) > quota.roles
        (the most generous of the caller's roles that sets it) > quota.default

They live where the counters live: with Redis, one hash ``<key_prefix>:overrides`` and a version
counter every change bumps, read by every replica at most ``quota.overrides_refresh_s`` after the
change (at its next admission); without
Redis, in this process. Who may change which override (``admin:policy`` in its domain) and the
audit record of each change are the caller's: this module only stores and resolves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from redis.exceptions import RedisError

from gateway.errors import ConfigError
from gateway.quota.config import QuotaLimits

__all__ = ["QuotaOverride", "QuotaOverrides"]

log = logging.getLogger("strongroom.quota")
Kind = Literal["role", "user"]
_MAX_NAME = 256


class QuotaOverride(msgspec.Struct, frozen=True, kw_only=True):
    kind: Kind
    name: str
    """A role name, or a token subject (``sub``)."""
    domain: str = "*"
    """``*``: every caller; otherwise only callers of this tenant."""
    limits: QuotaLimits

    def __post_init__(self) -> None:
        if self.kind not in ("role", "user"):
            raise ConfigError(f"quota override: kind must be role or user, not {self.kind!r}")
        for field, value in (("name", self.name), ("domain", self.domain)):
            if not value or len(value) > _MAX_NAME or "\0" in value or value != value.strip():
                raise ConfigError(f"quota override: {field} must be 1..{_MAX_NAME} characters, trimmed")

    @property
    def key(self) -> str:
        return _key(self.kind, self.name, self.domain)

    def describe(self) -> str:
        """For audit records and notices: ``user alice in retail: requests_per_minute=5``."""
        set_fields = [f"{f}={getattr(self.limits, f)}" for f in QuotaLimits.__struct_fields__]
        shown = [f for f in set_fields if not f.endswith("=None")] or ["(no limit set)"]
        return f"{self.kind} {self.name} in {self.domain}: {', '.join(shown)}"


def _key(kind: str, name: str, domain: str) -> str:
    return f"{kind}\0{domain}\0{name}"


class QuotaOverrides:
    def __init__(
        self,
        redis: Any | None,
        *,
        key_prefix: str,
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._hash = f"{key_prefix}:overrides"
        self._version_key = f"{key_prefix}:overrides:version"
        self._refresh_s = refresh_s
        self._clock = clock
        self._by_key: dict[str, QuotaOverride] = {}
        self._version: bytes | None = None
        self._checked_at = float("-inf")

    def find(self, kind: Kind, name: str, domain: str) -> QuotaLimits | None:
        """The override in force on this replica (as of its last refresh), or None."""
        found = self._by_key.get(_key(kind, name, domain))
        return None if found is None else found.limits

    def all(self) -> list[QuotaOverride]:
        return sorted(self._by_key.values(), key=lambda o: (o.domain, o.kind, o.name))

    async def put(self, override: QuotaOverride) -> None:
        """Set (or, with every limit unset, remove) one override, in force here at once."""
        is_clear = all(getattr(override.limits, f) is None for f in QuotaLimits.__struct_fields__)
        if self._redis is not None:
            async with self._redis.pipeline(transaction=True) as pipe:
                if is_clear:
                    pipe.hdel(self._hash, override.key)
                else:
                    pipe.hset(self._hash, override.key, msgspec.json.encode(override))
                pipe.incr(self._version_key)
                await pipe.execute()
            await self.refresh(force=True)
            return
        if is_clear:
            self._by_key.pop(override.key, None)
        else:
            self._by_key[override.key] = override

    async def refresh(self, *, force: bool = False) -> None:
        """Take in other replicas' changes: at most every ``refresh_s``, and only when the version
        moved. An unreachable Redis keeps the overrides last read (the limiter itself fails closed)."""
        now = self._clock()
        if self._redis is None or (not force and now - self._checked_at < self._refresh_s):
            return
        self._checked_at = now
        try:
            version = await self._redis.get(self._version_key)
            if version == self._version and not force:
                return
            raw = await self._redis.hgetall(self._hash)
        except RedisError as exc:
            log.warning("quota overrides not refreshed: %s", type(exc).__name__)
            return
        overrides = {}
        for value in raw.values():
            try:
                override = msgspec.json.decode(value, type=QuotaOverride)
            except (msgspec.DecodeError, msgspec.ValidationError, ConfigError):
                log.error("quota override unreadable in Redis; ignored")
                continue
            overrides[override.key] = override
        self._by_key, self._version = overrides, version
