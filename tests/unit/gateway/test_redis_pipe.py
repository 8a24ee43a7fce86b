"""RedisPipe against the real Redis on 127.0.0.1:6379: same answers as redis-py, same failures."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.auth._redis_revocations import RedisRevocations
from gateway.quota.redis_backend import RedisQuotaBackend
from gateway.redis_pipe import RedisPipe, _Replies
from tests.ports import free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pipe() -> AsyncIterator[RedisPipe]:
    pipe = RedisPipe.from_url("redis://127.0.0.1:6379/0", connect_timeout_s=2.0, timeout_s=2.0)
    assert pipe is not None
    yield pipe
    await pipe.aclose()


async def test_replies_match_redis_py(
    pipe: RedisPipe, redis_client: redis.asyncio.Redis, redis_prefix: str
) -> None:
    await redis_client.set(redis_prefix + "a", "1")
    await redis_client.zadd(redis_prefix + "z", {"m1": 1.5, "m2": 2})
    assert await pipe.mget(redis_prefix + "a", redis_prefix + "absent") == [b"1", None]
    assert await pipe.zrem(redis_prefix + "z", "m1", "nope") == 1
    await pipe.set(redis_prefix + "b", "x", ex=60)
    assert await redis_client.get(redis_prefix + "b") == b"x"
    assert 0 < await redis_client.ttl(redis_prefix + "b") <= 60
    assert await pipe.eval("return {1, 'two', KEYS[1], ARGV[1]}", 1, redis_prefix + "k", 2.5) == [
        1,
        b"two",
        (redis_prefix + "k").encode(),
        b"2.5",
    ]


async def test_concurrent_commands_get_their_own_replies(pipe: RedisPipe, redis_prefix: str) -> None:
    for i in range(50):
        await pipe.set(f"{redis_prefix}{i}", i)
    replies = await asyncio.gather(*(pipe.mget(f"{redis_prefix}{i}") for i in range(50)))
    assert replies == [[str(i).encode()] for i in range(50)]


async def test_an_error_reply_is_a_response_error_and_the_pipe_goes_on(
    pipe: RedisPipe, redis_prefix: str
) -> None:
    with pytest.raises(ResponseError):
        await pipe.execute("NOSUCHCOMMAND")
    assert await pipe.mget(redis_prefix + "a") == [None]


async def test_a_script_unknown_to_redis_is_sent_whole(pipe: RedisPipe) -> None:
    word = uuid.uuid4().hex  # a script never sent before: Redis answers NOSCRIPT to its SHA-1
    script = pipe.register_script(f"return {{KEYS[1], ARGV[1], '{word}'}}")
    assert await script(keys=["k"], args=[3]) == [b"k", b"3", word.encode()]
    assert await script(keys=["k"], args=[3]) == [b"k", b"3", word.encode()]  # now by its SHA-1


async def test_a_cancelled_caller_leaves_the_replies_in_step(pipe: RedisPipe, redis_prefix: str) -> None:
    await pipe.set(redis_prefix + "x", "x")
    slow = asyncio.ensure_future(pipe.execute("BLPOP", redis_prefix + "empty", "0.05"))  # nil after 50 ms
    await asyncio.sleep(0.01)
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow
    assert await pipe.mget(redis_prefix + "x") == [b"x"]


async def test_no_server_is_a_connection_error() -> None:
    pipe = RedisPipe("127.0.0.1", free_port(), connect_timeout_s=1.0, timeout_s=1.0)
    with pytest.raises(RedisConnectionError):
        await pipe.mget("a")


async def test_callers_without_a_connection_share_one_attempt(redis_prefix: str) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def refuse_login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        while data := await reader.read(1 << 16):
            writer.write(b"-WRONGPASS no\r\n" * data.count(b"AUTH"))

    server = await asyncio.start_server(refuse_login, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pipe = RedisPipe("127.0.0.1", port, password="pw", connect_timeout_s=1.0, timeout_s=1.0)
    try:
        failures = await asyncio.gather(
            *(pipe.mget(redis_prefix + "a") for _ in range(10)), return_exceptions=True
        )
        assert all(isinstance(f, RedisConnectionError) for f in failures)
        assert len(accepted) == 1  # one attempt failed all ten, not ten attempts one after another
    finally:
        await pipe.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_wrong_password_is_a_connection_error() -> None:
    pipe = RedisPipe.from_url("redis://nobody:wrong@127.0.0.1:6379/0", connect_timeout_s=1.0, timeout_s=1.0)
    assert pipe is not None
    with pytest.raises(RedisConnectionError) as refused:
        await pipe.mget("a")
    assert "wrong" not in str(refused.value)


async def test_a_silent_server_is_a_timeout_and_every_waiter_fails() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(1 << 16)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pipe = RedisPipe("127.0.0.1", port, connect_timeout_s=1.0, timeout_s=0.05)
    try:
        results = await asyncio.gather(pipe.mget("a"), pipe.mget("b"), return_exceptions=True)
        assert all(isinstance(r, RedisTimeoutError) for r in results)
    finally:
        await pipe.aclose()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_lost_connection_is_opened_again(pipe: RedisPipe, redis_client: redis.asyncio.Redis) -> None:
    await pipe.mget("a")
    await redis_client.client_kill_filter(_id=await pipe.execute("CLIENT", "ID"))
    with contextlib.suppress(RedisConnectionError):
        await pipe.mget("a")  # may meet the closed socket first
    assert await pipe.mget("a") == [None]


async def test_revocations_and_quotas_run_over_the_pipe(pipe: RedisPipe, redis_prefix: str) -> None:
    revocations = RedisRevocations(pipe, key_prefix=redis_prefix)
    await revocations.add_token("j1", expires_at=2_000.0, now=1_000.0)
    await revocations.add_subject("alice", before=1_500.0, expires_at=2_000.0, now=1_000.0)
    assert await revocations.lookup("j1", "alice", now=1_000.0) == (True, 1_500.0)
    assert await revocations.lookup("j2", "bob", now=1_000.0) == (False, None)
    backend = RedisQuotaBackend(pipe)
    await backend.release(redis_prefix + "inflight", "lease-1")


async def test_replies_split_across_reads_reach_their_callers_in_order() -> None:
    # Every cut of three replies (an array holding a nil, an integer, an error) into two reads.
    whole = b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n:5\r\n-ERR no\r\n"
    for cut in range(len(whole) + 1):
        replies = _Replies()
        loop = asyncio.get_running_loop()
        waiters = [loop.create_future() for _ in range(3)]
        replies._waiters.extend(waiters)
        replies.data_received(whole[:cut])
        replies.data_received(whole[cut:])
        assert waiters[0].result() == [b"a", None, 7] and waiters[1].result() == 5
        with pytest.raises(ResponseError, match="ERR no"):
            waiters[2].result()


async def test_a_malformed_reply_fails_every_waiter_and_drops_the_connection() -> None:
    replies = _Replies()
    waiter = asyncio.get_running_loop().create_future()
    replies._waiters.append(waiter)
    replies.data_received(b"?what\r\n")
    assert replies.is_lost
    with pytest.raises(RedisConnectionError, match="Unreadable reply"):
        waiter.result()


def test_only_plain_redis_urls_get_a_pipe() -> None:
    assert RedisPipe.from_url("rediss://h:6380/0", connect_timeout_s=1, timeout_s=1) is None
    assert RedisPipe.from_url("unix:///tmp/redis.sock", connect_timeout_s=1, timeout_s=1) is None
    pipe = RedisPipe.from_url("redis://u:s%40cret@h:6380/2", connect_timeout_s=1, timeout_s=1)
    assert pipe is not None
    assert "cret" not in repr(pipe)
    assert (pipe._host, pipe._port, pipe._db, pipe._username, pipe._password) == ("h", 6380, 2, "u", "s@cret")


class _Wire:
    """A transport that records writes (asyncio.Transport's two methods _Replies uses)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def abort(self) -> None:
        self.aborted = True


async def test_commands_sent_in_one_turn_of_the_loop_leave_in_one_write() -> None:
    replies, wire = _Replies(), _Wire()
    replies.connection_made(wire)  # type: ignore[arg-type]
    first, second = replies.send(b"*1\r\n$4\r\nPING\r\n"), replies.send(b"*1\r\n$4\r\nTIME\r\n")
    assert wire.writes == []
    await asyncio.sleep(0)
    assert wire.writes == [b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nTIME\r\n"]
    third = replies.send(b"*1\r\n$4\r\nECHO\r\n")
    await asyncio.sleep(0)
    assert wire.writes[1:] == [b"*1\r\n$4\r\nECHO\r\n"]
    replies.data_received(b"+PONG\r\n:1\r\n:2\r\n")
    assert (first.result(), second.result(), third.result()) == (b"PONG", 1, 2)


async def test_commands_of_a_connection_dropped_before_their_write_are_never_written() -> None:
    replies, wire = _Replies(), _Wire()
    replies.connection_made(wire)  # type: ignore[arg-type]
    waiter = replies.send(b"*1\r\n$4\r\nPING\r\n")
    replies.drop(RedisConnectionError("gone"))
    await asyncio.sleep(0)
    assert wire.writes == [] and wire.aborted
    with pytest.raises(RedisConnectionError, match="gone"):
        waiter.result()
