"""Console sessions, in memory, in the real Redis on 127.0.0.1:6379 and in the real PostgreSQL on
127.0.0.1:5432: idle and absolute time-outs checked on the stored timestamps, sign-out,
eviction, fresh ids (injected clock)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import psycopg
import pytest
import redis.asyncio

from common.principal import Principal
from gateway.console.config import ConsoleConfig
from gateway.console.errors import SessionsUnavailableError
from gateway.console.memory_sessions import MemorySessions
from gateway.console.postgres_sessions import PostgresSessions
from gateway.console.redis_sessions import RedisSessions
from gateway.console.session_store import SessionStore, open_session_store
from tests.unit.gateway.console.console_app import POSTGRES_DSN

OFFICER = Principal(subject="officer", roles=("compliance",), issuer="idp", tenant="retail")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Check = Callable[[SessionStore, Clock], Awaitable[None]]


async def _with_redis(check: Check, clock: Clock) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
    prefix = f"test:console:{uuid.uuid4().hex}"
    try:
        await check(RedisSessions(client, key_prefix=prefix, idle_s=60, absolute_s=300, clock=clock), clock)
    finally:
        keys = [k async for k in client.scan_iter(f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def _with_postgres(check: Check, clock: Clock) -> None:
    schema = f"test_console_{uuid.uuid4().hex[:12]}"
    store = PostgresSessions(POSTGRES_DSN, schema=schema, idle_s=60, absolute_s=300, clock=clock)
    try:
        await check(store, clock)
    finally:
        await store.aclose()
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _both(check: Check) -> None:
    """Run ``check`` against each store, each with its own clock."""
    clock = Clock()
    memory = MemorySessions(idle_s=60, absolute_s=300, max_sessions=10, clock=clock)
    asyncio.run(check(memory, clock))
    asyncio.run(_with_redis(check, Clock()))
    asyncio.run(_with_postgres(check, Clock()))


def test_idle_timeout_ends_a_session_and_each_request_restarts_it() -> None:
    async def check(store: SessionStore, clock: Clock) -> None:
        session_id, session = await store.create(OFFICER)
        clock.now += 59
        seen = await store.get(session_id)
        assert seen is not None and seen.csrf_token == session.csrf_token
        clock.now += 59  # 118 s after sign-in, 59 s after the last request
        again = await store.get(session_id)
        assert again is not None and again.principal == OFFICER and again.last_seen == clock.now
        clock.now += 60
        assert await store.get(session_id) is None
        clock.now -= 60  # ended for good, not merely looked expired
        assert await store.get(session_id) is None

    _both(check)


def test_absolute_timeout_ends_even_an_active_session() -> None:
    async def check(store: SessionStore, clock: Clock) -> None:
        session_id, _ = await store.create(OFFICER)
        for _ in range(5):
            clock.now += 50
            assert await store.get(session_id) is not None
        clock.now += 50  # 300 s after sign-in, though only 50 s idle
        assert await store.get(session_id) is None

    _both(check)


def test_sign_out_unknown_ids_and_fresh_values() -> None:
    async def check(store: SessionStore, clock: Clock) -> None:
        first_id, first = await store.create(OFFICER)
        second_id, second = await store.create(OFFICER)
        assert first_id != second_id and first.csrf_token != second.csrf_token
        assert len(first_id) >= 43 and len(first.csrf_token) >= 43
        await store.end(first_id)
        assert await store.get(first_id) is None
        kept = await store.get(second_id)
        assert kept is not None and kept.csrf_token == second.csrf_token
        for unknown in (None, "", second_id + "x"):
            assert await store.get(unknown) is None

    _both(check)


def test_the_oldest_in_memory_session_makes_room_and_repr_holds_no_secret() -> None:
    async def check() -> None:
        store = MemorySessions(idle_s=60, absolute_s=300, max_sessions=2, clock=Clock())
        ids = [(await store.create(OFFICER))[0] for _ in range(3)]
        assert await store.get(ids[0]) is None
        assert await store.get(ids[1]) is not None and await store.get(ids[2]) is not None
        session = await store.get(ids[2])
        assert session is not None and session.csrf_token not in repr(session) and ids[2] not in repr(session)

    asyncio.run(check())


def test_redis_holds_no_cookie_value_and_a_ttl_no_longer_than_the_time_left() -> None:
    async def check(store: SessionStore, clock: Clock) -> None:
        assert isinstance(store, RedisSessions)
        session_id, _ = await store.create(OFFICER)
        client = store._redis  # what is stored is the point of this test
        (key,) = [k async for k in client.scan_iter(f"{store._prefix}:*")]
        assert session_id.encode() not in key and session_id.encode() not in await client.get(key)
        assert 0 < await client.ttl(key) <= 60
        for _ in range(7):
            clock.now += 40
            assert await store.get(session_id) is not None
        # 280 s after sign-in: 20 s of the absolute time-out left, though idle would allow 60
        assert 0 < await client.ttl(key) <= 20

    asyncio.run(_with_redis(check, Clock()))


def test_an_unreachable_store_refuses_instead_of_letting_anyone_in() -> None:
    async def check() -> None:
        dead = redis.asyncio.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        store = open_session_store(ConsoleConfig(), dead, Clock())
        with pytest.raises(SessionsUnavailableError):
            await store.get("some-cookie")
        with pytest.raises(SessionsUnavailableError):
            await store.create(OFFICER)
        await dead.aclose()
        no_db = open_session_store(ConsoleConfig(), None, Clock(), postgres_dsn="host=127.0.0.1 port=1")
        assert isinstance(no_db, PostgresSessions)
        with pytest.raises(SessionsUnavailableError):
            await no_db.get("some-cookie")

    asyncio.run(check())
    assert isinstance(open_session_store(ConsoleConfig(), None, Clock()), MemorySessions)
