"""Fixtures shared by the gateway unit tests: the real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio


@pytest.fixture
async def redis_client() -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
    try:
        await client.ping()
    except Exception as exc:
        pytest.fail(f"Redis on 127.0.0.1:6379 must be running for these tests: {exc!r}")
    yield client
    await client.aclose()


@pytest.fixture
async def redis_prefix(redis_client: redis.asyncio.Redis) -> AsyncIterator[str]:
    """A key prefix of the test's own; its keys are deleted afterwards."""
    prefix = f"test:gateway:{uuid.uuid4().hex}:"
    yield prefix
    keys = [key async for key in redis_client.scan_iter(match=prefix + "*")]
    if keys:
        await redis_client.delete(*keys)
