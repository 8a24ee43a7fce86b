"""The Redis commands every request makes (revocation lookup, quota reserve and release), over one
pipelined connection per process.

redis-py's asyncio client spends several times a round trip's own CPU per command in its layers
(connection pool, retry and timeout wrappers; with or without hiredis, figures in
bench/BENCHMARKS.md), and a streamed request makes three such commands. ``RedisPipe`` sends each
command at once on a shared connection and matches replies to callers in order; the protocol
itself (packing commands, parsing replies) is hiredis, Redis's own C library::

    caller A ─ MGET ─────┐                              ┌─▶ reply 1 ─▶ A
    caller B ─ EVALSHA ──┼─▶ one connection ─▶ Redis ──┼─▶ reply 2 ─▶ B
    caller C ─ ZREM ─────┘   (a FIFO of waiters)        └─▶ reply 3 ─▶ C

Redis answers a connection's commands in the order they came, and runs one command at a time
whatever the number of connections, so one connection loses no parallelism. The commands callers
send during one turn of the event loop leave in one write at the end of it: on loopback a write's
system call costs the sender about as much CPU as Redis's reply (the kernel delivers it in the
writer's time), and under load many requests send in the same turn (bench/BENCHMARKS.md).
Concurrent callers that find no connection share one attempt to open it.

Failures keep redis-py's types (``redis.exceptions``), so callers still fail closed the same way:
no connection within ``connect_timeout_s`` or a lost one is ``ConnectionError``; no reply within
``timeout_s`` is ``TimeoutError`` and drops the connection (the order of replies is then unknown,
so every waiting command fails and the next one connects anew); an error reply is
``ResponseError``. A caller cancelled while waiting leaves its reply to be read and dropped.
Only ``redis://`` URLs (TCP, optional user, password and database) are served here; anything
else (TLS, a Unix socket) keeps redis-py for every command (``from_url`` answers None).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["PipeScript", "RedisPipe"]

_Arg = str | bytes | int | float


class RedisPipe:
    """One pipelined Redis connection, opened on first use and again after a failure."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        connect_timeout_s: float,
        timeout_s: float,
    ) -> None:
        self._host = host
        self._port = port
        self._db = db
        self._username = username
        self._password = password
        self._connect_timeout_s = connect_timeout_s
        self._timeout_s = timeout_s
        self._replies: _Replies | None = None
        self._opening: asyncio.Future[_Replies] | None = None

    def __repr__(self) -> str:  # never the password
        return f"RedisPipe({self._host}:{self._port}/{self._db})"

    @classmethod
    def from_url(cls, url: str, *, connect_timeout_s: float, timeout_s: float) -> RedisPipe | None:
        """A pipe for a ``redis://`` URL; None for any other scheme (left to redis-py)."""
        parts = urlsplit(url)
        if parts.scheme != "redis" or not parts.hostname or parts.query:
            return None
        path = parts.path.strip("/")
        return cls(
            parts.hostname,
            parts.port or 6379,
            db=int(path) if path else 0,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            connect_timeout_s=connect_timeout_s,
            timeout_s=timeout_s,
        )

    async def execute(self, *args: _Arg) -> Any:
        """Send one command and wait for its reply (bytes, int, None or a list of them)."""
        replies = self._replies
        if replies is None or replies.is_lost:
            if self._opening is None or self._opening.done():
                self._opening = asyncio.ensure_future(self._connect())
                self._opening.add_done_callback(_retrieve)  # when every waiter left
            # Shielded: a caller that leaves does not cancel the attempt the others wait on.
            replies = await asyncio.shield(self._opening)
        return await self._send(replies, args)

    async def mget(self, *keys: str) -> list[bytes | None]:
        result: list[bytes | None] = await self.execute("MGET", *keys)
        return result

    async def zrem(self, key: str, *members: str) -> int:
        result: int = await self.execute("ZREM", key, *members)
        return result

    async def set(self, key: str, value: _Arg, *, ex: int | None = None) -> None:
        await self.execute("SET", key, value, *(("EX", ex) if ex is not None else ()))

    async def eval(self, script: str, num_keys: int, *keys_and_args: _Arg) -> Any:
        return await self.execute("EVAL", script, num_keys, *keys_and_args)

    def register_script(self, script: str) -> PipeScript:
        return PipeScript(self, script)

    async def aclose(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
        if self._replies is not None:
            self._replies.drop(RedisConnectionError("Redis pipe closed"))
            self._replies = None

    async def _send(self, replies: _Replies, args: Sequence[_Arg]) -> Any:
        # hiredis's stub types the argument as a one-element tuple; it takes any length.
        waiter = replies.send(hiredis.pack_command(tuple(args)))  # type: ignore[arg-type]
        timer = asyncio.get_running_loop().call_later(self._timeout_s, replies.time_out, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()

    async def _connect(self) -> _Replies:
        loop = asyncio.get_running_loop()
        try:
            _, replies = await asyncio.wait_for(
                loop.create_connection(_Replies, self._host, self._port), self._connect_timeout_s
            )
        except TimeoutError:
            raise RedisTimeoutError("Timeout connecting to Redis") from None
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {type(exc).__name__}") from None
        try:
            if self._password is not None:
                login = (self._username, self._password) if self._username else (self._password,)
                await self._send(replies, ("AUTH", *login))
            if self._db:
                await self._send(replies, ("SELECT", self._db))
        except ResponseError as exc:  # Redis's words, never the password
            replies.drop(RedisConnectionError("Redis refused the login or database"))
            raise RedisConnectionError(f"Redis refused the login or database: {exc}") from None
        self._replies = replies
        return replies


class PipeScript:
    """A Lua script run by its SHA-1 (``EVALSHA``), sent whole once Redis does not know it."""

    def __init__(self, pipe: RedisPipe, script: str) -> None:
        self._pipe = pipe
        self._script = script
        self._sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, keys: Sequence[_Arg] = (), args: Sequence[_Arg] = ()) -> Any:
        try:
            return await self._pipe.execute("EVALSHA", self._sha, len(keys), *keys, *args)
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self._pipe.execute("EVAL", self._script, len(keys), *keys, *args)


class _Replies(asyncio.Protocol):
    """The connection: commands go out as written, replies resolve the waiters in order."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        # Redis's own RESP parser (the one redis-py uses when installed): error replies come
        # back as ResponseError values, a malformed stream raises RedisConnectionError.
        self._reader = hiredis.Reader(protocolError=RedisConnectionError, replyError=ResponseError)
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._unsent: list[bytes] = []
        """Commands sent this turn of the event loop, written together by ``_write``."""
        self.is_lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def send(self, command: bytes) -> asyncio.Future[Any]:
        if self.is_lost or self._transport is None:
            raise RedisConnectionError("Connection to Redis lost")
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        if not self._unsent:
            loop.call_soon(self._write)
        self._unsent.append(command)
        return waiter

    def _write(self) -> None:
        unsent, self._unsent = self._unsent, []
        if self._transport is not None and not self.is_lost:  # else their waiters have failed
            self._transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            try:
                value = self._reader.gets()
            except RedisConnectionError as exc:
                self.drop(RedisConnectionError(f"Unreadable reply from Redis: {exc}"))
                return
            if value is False:  # no whole reply buffered yet
                return
            if not self._waiters:  # a reply nobody asked for: the stream is out of step
                self.drop(RedisConnectionError("Unexpected reply from Redis"))
                return
            waiter = self._waiters.popleft()
            if waiter.done():  # its caller was cancelled
                continue
            if isinstance(value, ResponseError):
                waiter.set_exception(value)
            else:
                waiter.set_result(value)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError("Connection to Redis lost"))

    def time_out(self, waiter: asyncio.Future[Any]) -> None:
        if not waiter.done():
            self.drop(RedisTimeoutError("Timeout reading from Redis"))

    def drop(self, error: Exception) -> None:
        """Fail every waiting command and close: later replies could not be matched any more."""
        self._fail(error)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, error: Exception) -> None:
        self.is_lost = True
        self._unsent = []
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)


def _retrieve(attempt: asyncio.Future[_Replies]) -> None:
    if not attempt.cancelled():
        attempt.exception()
