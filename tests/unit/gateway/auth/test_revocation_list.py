"""RevocationList against the real Redis on 127.0.0.1:6379 and against SQLite; fail-closed paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import FakeClock

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.auth import AuthConfig, AuthenticationError, DevIssuer, RevocationList, TokenVerifier
from gateway.auth.errors import RevocationUnavailableError
from tests.ports import free_port

pytestmark = pytest.mark.anyio


def dead_redis() -> redis.asyncio.Redis:
    """A client for a port nobody listens on; without retries, so the failure is immediate."""
    return redis.asyncio.Redis(
        host="127.0.0.1", port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )


@pytest.fixture(params=["sqlite", "redis"])
async def revocations(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[RevocationList]:
    client = None
    prefix = f"test:auth:{uuid.uuid4().hex}:"
    if request.param == "redis":
        client = redis.asyncio.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
        try:
            await client.ping()
        except Exception as exc:
            pytest.fail(f"Redis on 127.0.0.1:6379 must be running for these tests: {exc!r}")
    cfg = AuthConfig(max_lifetime_s=3600, leeway_s=30, revocation_key_prefix=prefix)
    revocation_list = RevocationList.open(cfg, tmp_path, redis=client, clock=clock)
    yield revocation_list
    await revocation_list.aclose()
    if client is not None:
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_revoked_jti_until_its_exp(revocations: RevocationList, clock: FakeClock) -> None:
    await revocations.revoke_token("jti-1", expires_at=clock.now + 100)
    assert await revocations.find(jti="jti-1", subject="alice", issued_at=clock.now) == "jti"
    assert await revocations.find(jti="jti-2", subject="alice", issued_at=clock.now) is None
    assert await revocations.find(jti=None, subject="alice", issued_at=clock.now) is None


async def test_subject_revoked_before_a_time(revocations: RevocationList, clock: FakeClock) -> None:
    cutoff = clock.now
    await revocations.revoke_subject("alice", before=cutoff)
    assert await revocations.find(jti="a", subject="alice", issued_at=cutoff - 10) == "subject"
    assert await revocations.find(jti="a", subject="alice", issued_at=cutoff) == "subject"
    assert await revocations.find(jti="a", subject="alice", issued_at=cutoff + 1) is None
    assert await revocations.find(jti="a", subject="bob", issued_at=cutoff - 10) is None
    await revocations.revoke_subject("alice", before=cutoff - 100)
    assert await revocations.find(jti="a", subject="alice", issued_at=cutoff - 10) == "subject"


async def test_sqlite_entries_expire_by_the_injected_clock(tmp_path: Path, clock: FakeClock) -> None:
    # Redis expires keys by its own clock (TTLs are checked in test_redis_entries_carry_a_ttl).
    revocation_list = RevocationList.open(AuthConfig(max_lifetime_s=3600), tmp_path, redis=None, clock=clock)
    await revocation_list.revoke_token("jti-1", expires_at=clock.now + 100)
    await revocation_list.revoke_subject("alice", before=clock.now)
    issued_at = clock.now - 10
    clock.advance(101)
    assert await revocation_list.find(jti="jti-1", subject="bob", issued_at=issued_at) is None
    assert await revocation_list.find(jti="x", subject="alice", issued_at=issued_at) == "subject"
    clock.advance(3600 + 30)
    assert await revocation_list.find(jti="x", subject="alice", issued_at=issued_at) is None
    await revocation_list.aclose()


async def test_redis_entries_carry_a_ttl(
    redis_client: redis.asyncio.Redis, redis_prefix: str, tmp_path: Path, clock: FakeClock
) -> None:
    cfg = AuthConfig(revocation_key_prefix=redis_prefix)
    revocation_list = RevocationList.open(cfg, tmp_path, redis=redis_client, clock=clock)
    await revocation_list.revoke_token("jti-9", expires_at=clock.now + 50)
    await revocation_list.revoke_subject("carol", before=clock.now)
    assert 0 < await redis_client.ttl(f"{redis_prefix}jti:jti-9") <= 50
    assert 86400 < await redis_client.ttl(f"{redis_prefix}sub:carol") <= 86400 + 30
    await revocation_list.revoke_token("expired", expires_at=clock.now - 1)
    assert not await redis_client.exists(f"{redis_prefix}jti:expired")


async def test_sqlite_is_shared_between_instances(tmp_path: Path, clock: FakeClock) -> None:
    writer = RevocationList.open(AuthConfig(), tmp_path, redis=None, clock=clock)
    reader = RevocationList.open(AuthConfig(), tmp_path, redis=None, clock=clock)
    await writer.revoke_token("shared", expires_at=clock.now + 60)
    assert await reader.find(jti="shared", subject="x", issued_at=clock.now) == "jti"
    await writer.aclose()
    await reader.aclose()


async def test_unreachable_redis_fails_closed_and_is_counted(tmp_path: Path, clock: FakeClock) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    dead = dead_redis()
    revocation_list = RevocationList.open(AuthConfig(), tmp_path, redis=dead, clock=clock, meter=meter)
    with pytest.raises(RevocationUnavailableError):
        await revocation_list.find(jti="x", subject="alice", issued_at=clock.now)
    with pytest.raises(RevocationUnavailableError):
        await revocation_list.revoke_token("x", expires_at=clock.now + 10)
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "strongroom.auth.revocation_store_errors"
        for point in metric.data.data_points
    ]
    assert sum(point.value for point in points) == 2
    await dead.aclose()


@pytest.mark.parametrize("fail_open", [False, True])
async def test_verifier_denies_when_redis_is_down_unless_fail_open(
    tmp_path: Path, clock: FakeClock, fail_open: bool
) -> None:
    token = DevIssuer.load_or_create(tmp_path, clock=clock).mint("alice", ["analyst"])
    dead = dead_redis()
    cfg = AuthConfig(revocation_fail_open=fail_open)
    verifier = TokenVerifier.create(cfg, tmp_path, redis=dead, clock=clock)
    try:
        if fail_open:
            assert (await verifier.verify(f"Bearer {token}")).subject == "alice"
        else:
            # An outage, not bad credentials: 503 with Retry-After (was 401 "Invalid token").
            with pytest.raises(RevocationUnavailableError) as outage:
                await verifier.verify(f"Bearer {token}")
            assert outage.value.status_code == 503 and outage.value.headers["retry-after"] == "2"
        # A forged token is still refused as one: the signature is checked before the list.
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        with pytest.raises(AuthenticationError) as caught:
            await verifier.verify(f"Bearer {forged}")
        assert caught.value.reason == "bad signature"
    finally:
        await verifier.aclose()
        await dead.aclose()


async def test_verifier_checks_redis_revocations(
    redis_client: redis.asyncio.Redis, redis_prefix: str, tmp_path: Path, clock: FakeClock
) -> None:
    issuer = DevIssuer.load_or_create(tmp_path, clock=clock)
    cfg = AuthConfig(revocation_key_prefix=redis_prefix)
    verifier = TokenVerifier.create(cfg, tmp_path, redis=redis_client, clock=clock)
    admin = RevocationList.open(cfg, tmp_path, redis=redis_client, clock=clock)
    first, second = issuer.mint("alice", []), issuer.mint("bob", [])
    principal = await verifier.verify(f"Bearer {first}")
    await admin.revoke_token(principal.token_id or "", expires_at=principal.expires_at)
    await admin.revoke_subject("bob", before=clock.now)
    for token, reason in (
        (first, "token revoked (jti)"),
        (second, "subject revoked before this token's iat"),
    ):
        with pytest.raises(AuthenticationError) as caught:
            await verifier.verify(f"Bearer {token}")
        assert caught.value.reason == reason
    clock.advance(1)
    assert (await verifier.verify(f"Bearer {issuer.mint('bob', [])}")).subject == "bob"
    await verifier.aclose()
