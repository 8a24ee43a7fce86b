"""Fixtures of the auth unit tests: an injectable clock, keys, and the real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

T0 = 1_800_000_000.0


class FakeClock:
    """An injectable wall clock that tests move by hand (``advance``); nothing sleeps."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


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
    prefix = f"test:auth:{uuid.uuid4().hex}:"
    yield prefix
    keys = [key async for key in redis_client.scan_iter(match=prefix + "*")]
    if keys:
        await redis_client.delete(*keys)
