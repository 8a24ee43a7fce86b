from __future__ import annotations

import asyncio

import pytest

from common.principal import Principal
from gateway.quota import QuotaConfig, QuotaExceededError, QuotaLimits, Quotas


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def who(sub: str = "alice", *roles: str) -> Principal:
    return Principal(subject=sub, roles=roles, issuer="https://idp")


LIMITS = QuotaLimits(
    requests_per_minute=3, tokens_per_minute=100, concurrent_requests=2, max_tokens_ceiling=50
)


def make(clock: Clock, **kw: object) -> Quotas:
    return Quotas(QuotaConfig(default=LIMITS, **kw), clock=clock)  # type: ignore[arg-type]


def test_requests_per_window_and_reset() -> None:
    async def run() -> None:
        clock = Clock()
        q = make(clock)
        for _ in range(3):
            await (await q.reserve(who(), "m", 1)).release()
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(who(), "m", 1)
        err = info.value
        assert err.status_code == 429 and err.limit == "requests" and err.retryable
        assert err.headers["x-ratelimit-remaining-requests"] == "0"
        assert err.limit_value == 3 and err.remaining == 0 and err.reset_s == 20
        assert err.headers["retry-after"] == "20"  # window [999960, 1000020)
        assert "x-should-retry" not in err.headers
        await q.reserve(who("bob"), "m", 1)  # another subject has its own counters
        clock.now += 20
        lease = await q.reserve(who(), "m", 1)
        assert lease.headers["x-ratelimit-remaining-requests"] == "2"
        assert lease.headers["x-ratelimit-limit-tokens"] == "100"

    asyncio.run(run())


def test_tokens_reserved_up_front_and_refunded_on_settle() -> None:
    async def run() -> None:
        q = make(Clock())
        first = await q.reserve(who(), "m", 60)
        assert first.headers["x-ratelimit-remaining-tokens"] == "40"
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(who(), "m", 50)
        assert info.value.limit == "tokens" and info.value.retryable
        await first.settle(10)  # 50 tokens come back
        await first.settle(0)  # settling twice changes nothing
        second = await q.reserve(who(), "m", 50)
        assert second.headers["x-ratelimit-remaining-tokens"] == "40"  # 10 + 50 used

    asyncio.run(run())


def test_concurrency_slots_and_release() -> None:
    async def run() -> None:
        q = make(Clock())
        a, b = await q.reserve(who(), "m", 1), await q.reserve(who(), "m", 1)
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(who(), "m", 1)
        assert info.value.limit == "concurrency" and info.value.retryable
        await a.release()
        await a.release()  # idempotent: does not free b's slot
        async with b:
            pass
        c = await q.reserve(who(), "m", 1)
        assert c.released is False

    asyncio.run(run())


def test_not_retryable_refusals() -> None:
    async def run() -> None:
        q = make(Clock())
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(who(), "m", 10, max_tokens=51)
        assert not info.value.retryable and info.value.headers["x-should-retry"] == "false"
        assert info.value.limit == "max_tokens" and "retry-after" not in info.value.headers
        # An invalid request for this caller, as OpenAI answers max_tokens over a model's limit.
        assert (info.value.status_code, info.value.code, info.value.param) == (
            400,
            "invalid_value",
            "max_tokens",
        )
        with pytest.raises(QuotaExceededError) as info:
            await q.reserve(who(), "m", 101)
        assert not info.value.retryable and info.value.limit == "tokens"
        lease = await q.reserve(who(), "m", 10, max_tokens=50)  # refusals above counted nothing
        assert lease.headers["x-ratelimit-remaining-requests"] == "2"

    asyncio.run(run())


def test_limits_resolve_subject_then_most_generous_role_then_default() -> None:
    q = Quotas(
        QuotaConfig(
            default=LIMITS,
            roles={
                "gold": QuotaLimits(requests_per_minute=100),
                "silver": QuotaLimits(requests_per_minute=10, concurrent_requests=5),
            },
            subjects={"vip": QuotaLimits(concurrent_requests=9)},
        )
    )
    assert q.limits_for(who("x", "silver", "gold")).requests_per_minute == 100
    assert q.limits_for(who("x", "silver", "gold")).concurrent_requests == 5
    assert q.limits_for(who("vip", "silver")).concurrent_requests == 9
    assert q.limits_for(who("x")).tokens_per_minute == 100


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="requests_per_minute must be >= 1"):
        QuotaLimits(requests_per_minute=0)
    with pytest.raises(ValueError, match="must be set"):
        QuotaConfig(default=QuotaLimits(requests_per_minute=1))
