"""Quota overrides over the configuration: the resolution order per field and per tenant, in
memory and shared through the real Redis on 127.0.0.1:6379 (a change on one replica limits the
other)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aredis

from common.principal import Principal
from gateway.errors import ConfigError
from gateway.quota import QuotaConfig, QuotaExceededError, QuotaLimits, Quotas
from gateway.quota.quota_overrides import QuotaOverride, QuotaOverrides

NOW = 2_000_000.0


def _config(prefix: str = "strongroom:quota") -> QuotaConfig:
    return QuotaConfig(
        default=QuotaLimits(
            requests_per_minute=100, tokens_per_minute=10_000, concurrent_requests=10, max_tokens_ceiling=1000
        ),
        roles={"analyst": QuotaLimits(requests_per_minute=50, tokens_per_minute=5000)},
        subjects={"alice": QuotaLimits(concurrent_requests=2)},
        key_prefix=prefix,
    )


def _override(kind: str, name: str, domain: str = "*", **limits: int) -> QuotaOverride:
    return QuotaOverride(kind=kind, name=name, domain=domain, limits=QuotaLimits(**limits))  # type: ignore[arg-type]


def test_overrides_come_before_the_configuration_field_by_field_and_tenant_before_every_tenant() -> None:
    async def go() -> None:
        quotas = Quotas(_config())
        alice = Principal(subject="alice", roles=("analyst",), issuer="idp", tenant="retail")
        bob = Principal(subject="bob", roles=("analyst",), issuer="idp", tenant="markets")
        before = quotas.limits_for(alice)
        assert (before.requests_per_minute, before.concurrent_requests) == (50, 2)

        await quotas.overrides.put(_override("role", "analyst", requests_per_minute=7))
        await quotas.overrides.put(_override("role", "analyst", "retail", requests_per_minute=9))
        await quotas.overrides.put(_override("user", "alice", "*", max_tokens_ceiling=10))
        limits = quotas.limits_for(alice)
        assert limits.requests_per_minute == 9  # the tenant's role override
        assert limits.tokens_per_minute == 5000  # the configured role field, not overridden
        assert limits.concurrent_requests == 2  # the configured subject field
        assert limits.max_tokens_ceiling == 10  # the user override
        assert quotas.limits_for(bob).requests_per_minute == 7  # another tenant: the * override

        await quotas.overrides.put(_override("role", "analyst", "retail"))  # every field unset: removed
        assert quotas.limits_for(alice).requests_per_minute == 7
        assert [o.describe() for o in quotas.overrides.all()] == [
            "role analyst in *: requests_per_minute=7",
            "user alice in *: max_tokens_ceiling=10",
        ]

    asyncio.run(go())


@pytest.mark.parametrize(
    ("kind", "name", "limits"),
    [
        ("team", "x", {}),
        ("user", "", {}),
        ("user", " x", {}),
        ("role", "a\0b", {}),
        ("role", "r", {"requests_per_minute": 0}),
    ],
)
def test_a_malformed_override_is_refused(kind: str, name: str, limits: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        _override(kind, name, **limits)


def test_an_override_set_on_one_replica_limits_callers_on_another() -> None:
    prefix = f"test:quota:{uuid.uuid4().hex}"

    async def go() -> None:
        client = aredis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
        try:
            one = Quotas(_config(prefix), client, clock=lambda: NOW)
            two = Quotas(_config(prefix), client, clock=lambda: NOW)
            carol = Principal(subject="carol", roles=(), issuer="idp")
            lease = await two.reserve(carol, "m", 10)
            await lease.release()
            await one.overrides.put(_override("user", "carol", requests_per_minute=2))
            await two.overrides.refresh(force=True)  # what the next reserve after refresh_s does
            lease = await two.reserve(carol, "m", 10)
            await lease.release()
            with pytest.raises(QuotaExceededError) as refused:
                await two.reserve(carol, "m", 10)
            assert refused.value.limit == "requests"
            fresh = Quotas(_config(prefix), client, clock=lambda: NOW)
            await fresh.overrides.refresh()
            assert fresh.limits_for(carol).requests_per_minute == 2
        finally:
            keys = [k async for k in client.scan_iter(f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()

    asyncio.run(go())


def test_a_replica_looks_for_changes_at_most_every_refresh_interval() -> None:
    prefix = f"test:quota:{uuid.uuid4().hex}"

    async def go() -> None:
        client = aredis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
        now = [0.0]
        try:
            writer = QuotaOverrides(client, key_prefix=prefix)
            reader = QuotaOverrides(client, key_prefix=prefix, refresh_s=5.0, clock=lambda: now[0])
            await reader.refresh()
            await writer.put(_override("role", "analyst", requests_per_minute=3))
            now[0] = 4.9
            await reader.refresh()
            assert reader.find("role", "analyst", "*") is None  # not looked yet
            now[0] = 5.0
            await reader.refresh()
            limits = reader.find("role", "analyst", "*")
            assert limits is not None and limits.requests_per_minute == 3
        finally:
            keys = [k async for k in client.scan_iter(f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()

    asyncio.run(go())
