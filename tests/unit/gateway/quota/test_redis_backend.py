"""Against the real Redis on 127.0.0.1:6379: limits are exact across processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis

from common.principal import Principal
from gateway.quota import QuotaConfig, QuotaExceededError, QuotaLimits, Quotas, QuotaUnavailableError

URL = "redis://127.0.0.1:6379/0"
NOW = 2_000_000.0


@pytest.fixture
def prefix() -> Iterator[str]:
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis must run on 127.0.0.1:6379 for these tests: {exc}")
    name = f"test:quota:{uuid.uuid4().hex}"
    yield name
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)
    client.close()


def config(prefix: str, **limits: int) -> QuotaConfig:
    base = {
        "requests_per_minute": 1000,
        "tokens_per_minute": 100_000,
        "concurrent_requests": 1000,
        "max_tokens_ceiling": 1000,
    }
    return QuotaConfig(default=QuotaLimits(**{**base, **limits}), key_prefix=prefix)


ALICE = Principal(subject="alice", roles=(), issuer="https://idp")

_BURST = """
import asyncio, json, sys, time
import redis.asyncio as aredis
from common.principal import Principal
from gateway.quota import QuotaConfig, QuotaExceededError, QuotaLimits, Quotas
prefix, start_at, n, rpm, conc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
async def main():
    client = aredis.Redis.from_url("redis://127.0.0.1:6379/0")
    cfg = QuotaConfig(default=QuotaLimits(requests_per_minute=rpm, tokens_per_minute=10**6,
                      concurrent_requests=conc, max_tokens_ceiling=1000), key_prefix=prefix)
    quotas = Quotas(cfg, client, clock=lambda: 2_000_000.0)
    who = Principal(subject="alice", roles=(), issuer="https://idp")
    async def one():
        try:
            await quotas.reserve(who, "m", 10)
            return 1
        except QuotaExceededError:
            return 0
    await client.ping()
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    results = await asyncio.gather(*(one() for _ in range(n)))
    print(json.dumps(sum(results)))
    await client.aclose()
asyncio.run(main())
"""


def _burst_in_two_processes(prefix: str, per_process: int, rpm: int, conc: int) -> int:
    start_at = time.time() + 1.5
    args = [prefix, str(start_at), str(per_process), str(rpm), str(conc)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BURST, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    admitted = 0
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        admitted += json.loads(out)
    return admitted


def test_burst_across_two_processes_admits_exactly_the_request_limit(prefix: str) -> None:
    assert _burst_in_two_processes(prefix, per_process=40, rpm=25, conc=1000) == 25


def test_burst_across_two_processes_admits_exactly_the_concurrency_limit(prefix: str) -> None:
    assert _burst_in_two_processes(prefix, per_process=30, rpm=1000, conc=7) == 7


def test_reserve_settle_release_in_redis(prefix: str) -> None:
    async def run() -> None:
        client = aredis.Redis.from_url(URL)
        clock = [NOW]
        q = Quotas(
            config(prefix, tokens_per_minute=100, concurrent_requests=1), client, clock=lambda: clock[0]
        )
        lease = await q.reserve(ALICE, "m", 80)
        assert lease.headers["x-ratelimit-remaining-tokens"] == "20"
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(ALICE, "m", 30)
        assert info.value.limit == "tokens"  # checked before concurrency
        await lease.settle(30)
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(ALICE, "m", 10)
        assert info.value.limit == "concurrency"
        await lease.release()
        second = await q.reserve(ALICE, "m", 70)
        assert second.headers["x-ratelimit-remaining-tokens"] == "0"
        await second.release()
        clock[0] = NOW + 60  # next window: tokens start again
        third = await q.reserve(ALICE, "m", 100)
        assert third.headers["x-ratelimit-remaining-tokens"] == "0"
        await client.aclose()

    asyncio.run(run())


def test_stale_slot_expires_after_lease_ttl(prefix: str) -> None:
    async def run() -> None:
        client = aredis.Redis.from_url(URL)
        clock = [NOW]
        cfg = QuotaConfig(
            default=config(prefix, concurrent_requests=1).default, key_prefix=prefix, lease_ttl_s=30
        )
        q = Quotas(cfg, client, clock=lambda: clock[0])
        await q.reserve(ALICE, "m", 1)  # never released: its holder "crashed"
        with pytest.raises(QuotaExceededError):
            await q.reserve(ALICE, "m", 1)
        clock[0] = NOW + 31
        await q.reserve(ALICE, "m", 1)
        await client.aclose()

    asyncio.run(run())


def test_unreachable_redis_fails_closed_unless_fail_open(prefix: str) -> None:
    async def run() -> None:
        dead = aredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        with pytest.raises(QuotaUnavailableError) as info:
            await Quotas(config(prefix), dead).reserve(ALICE, "m", 1)
        assert info.value.status_code == 503
        cfg = QuotaConfig(default=config(prefix).default, key_prefix=prefix, fail_open=True)
        lease = await Quotas(cfg, dead).reserve(ALICE, "m", 1)
        await lease.settle(1)
        await lease.release()  # no-ops, never raise
        await dead.aclose()

    asyncio.run(run())
