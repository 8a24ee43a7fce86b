"""Access control under a Redis outage (issue 18, #9), against a redis-server of the test's own.

Down: every request is a 503 with ``Retry-After`` (was 401 "Invalid token": the revocation check
failed first). Stalled while requests are in flight: their concurrency slots are freed as soon as
Redis answers again (they were held for the 15-minute lease TTL, locking the subject out).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from common.principal import Principal
from gateway.auth.dev_issuer import DevIssuer
from gateway.quota import QuotaConfig, QuotaExceededError, QuotaLimits, Quotas, QuotaUnavailableError
from gateway.services import _redis_client, _redis_pipe

pytestmark = pytest.mark.integration

ALICE = Principal(subject="alice", roles=(), issuer="https://idp")


def _quotas(
    url: str, *, concurrent: int, lease_ttl_s: float = 30.0, clock: Any = None, pipe: bool = False
) -> tuple[Quotas, Any, Any]:
    limits = QuotaLimits(
        requests_per_minute=1000,
        tokens_per_minute=10**6,
        concurrent_requests=concurrent,
        max_tokens_ceiling=100,
    )
    client = _redis_client(url)
    kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
    per_request = _redis_pipe(url) if pipe else None  # reserve, release and renew over the pipe
    quotas = Quotas(
        QuotaConfig(default=limits, lease_ttl_s=lease_ttl_s), client, per_request=per_request, **kw
    )
    return quotas, client, per_request


@pytest.mark.parametrize("pipe", [False, True], ids=["redis-py", "pipe"])
def test_slots_of_requests_that_ended_during_a_stall_are_freed_on_recovery(
    private_redis: Any, pipe: bool
) -> None:
    async def go() -> None:
        quotas, client, per_request = _quotas(private_redis.url, concurrent=2, pipe=pipe)
        try:
            leases = [await quotas.reserve(ALICE, "m", 10) for _ in range(2)]
            private_redis.stall()
            try:
                for lease in leases:  # the requests end while Redis does not answer
                    await lease.release()
                with pytest.raises(QuotaUnavailableError) as outage:
                    await quotas.reserve(ALICE, "m", 10)
                assert outage.value.status_code == 503 and outage.value.headers["retry-after"]
            finally:
                private_redis.resume()
            admitted = None
            for _ in range(100):  # the keeper retries every 0.5 s; the old code held 15 minutes
                try:
                    admitted = await quotas.reserve(ALICE, "m", 10)
                    break
                except QuotaExceededError:
                    await asyncio.sleep(0.1)
            assert admitted is not None, "the subject is locked out after Redis recovered"
            # Every old slot goes, also the one of the reservation refused during the stall, which
            # Redis ran when it resumed: only the new lease remains (long before any TTL).
            [key] = await client.keys("strongroom:quota:*:inflight")
            for _ in range(50):
                if await client.zrange(key, 0, -1) == [admitted.lease_id.encode()]:
                    break
                await asyncio.sleep(0.1)
            assert await client.zrange(key, 0, -1) == [admitted.lease_id.encode()]
            await admitted.release()
        finally:
            await quotas.aclose()
            await client.aclose()
            if per_request is not None:
                await per_request.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("pipe", [False, True], ids=["redis-py", "pipe"])
def test_a_long_request_keeps_its_slot_past_the_lease_ttl(private_redis: Any, pipe: bool) -> None:
    now = [2_000_000.0]

    async def go() -> None:
        quotas, client, per_request = _quotas(
            private_redis.url, concurrent=1, lease_ttl_s=0.3, clock=lambda: now[0], pipe=pipe
        )
        try:
            lease = await quotas.reserve(ALICE, "m", 10)
            [(key, first_expiry)] = [
                (k, s)
                for k in await client.keys("strongroom:quota:*:inflight")
                for _, s in await client.zrange(k, 0, -1, withscores=True)
            ]
            now[0] += 10.0  # the request runs on, far past the TTL
            for _ in range(100):  # the keeper renews every lease_ttl_s / 3 of real time
                [(_, expiry)] = await client.zrange(key, 0, -1, withscores=True)
                if expiry > first_expiry:
                    break
                await asyncio.sleep(0.05)
            assert expiry == pytest.approx(now[0] + 0.3)
            with pytest.raises(QuotaExceededError) as busy:  # still held: the limit still holds
                await quotas.reserve(ALICE, "m", 10)
            assert busy.value.limit == "concurrency"
            await lease.release()
            assert await client.zcard(key) == 0
        finally:
            await quotas.aclose()
            await client.aclose()
            if per_request is not None:
                await per_request.aclose()

    asyncio.run(go())


def test_redis_down_is_503_with_retry_after_not_401(tmp_path: Any, serve: Any, private_redis: Any) -> None:
    with serve(
        tmp_path, args=("--stub-engine",), extra_env={"STRONGROOM_REDIS_URL": private_redis.url}
    ) as gw:
        token = DevIssuer.load_or_create(gw.data_dir).mint("alice", ["analyst"])
        headers = {"authorization": f"Bearer {token}"}
        body = {"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(f"{gw.v1}/chat/completions", json=body, headers=headers).status_code == 200
        private_redis.stop()
        for method, path in (("POST", "/chat/completions"), ("GET", "/models")):
            r = httpx.request(
                method, f"{gw.v1}{path}", json=body if method == "POST" else None, headers=headers
            )
            assert r.status_code == 503, (path, r.text)
            assert r.headers["retry-after"] == "2" and r.json()["error"]["code"] == "revocation_unavailable"
        # A bad token is still a 401: the signature is checked before the revocation list.
        r = httpx.post(f"{gw.v1}/chat/completions", json=body, headers={"authorization": f"Bearer {token}x"})
        assert r.status_code == 401
        outages = [
            rec["event"]
            for rec in gw.audit_records(50)
            if rec["event"].get("status") == 503
            and rec["event"].get("event_type") == "authentication_failure"
        ]
        assert len(outages) == 2 and all(e["decision"] == "error" for e in outages)
