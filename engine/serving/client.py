"""The gateway's side of ``engine.serving.protocol``: one engine instance.

Generations and token counts go over one link (``engine.serving.engine_link``): a WebSocket
opened on first use and shared by everything after it, reopened once the engine has gone away.
Leaving a stream early sends the engine an abort for it; the link ending fails every stream on it.

Health, info and embeddings are plain HTTP/1.1 calls over a pool of keep-alive connections,
apart from the link, so a probe never waits behind a busy link's frames::

    idle connection (or connect) ─▶ one write: head + body ─▶ status line and headers
        ─▶ body: content-length or chunked ─▶ back to the pool

Bytes land in the connection's buffer as they arrive (an ``asyncio.Protocol``); the reader
parses what is there and waits only when it needs more, each wait bounded by the read timeout.
A general-purpose client (httpx) spent more CPU per call than the rest of the gateway pipeline
together; this one a small fraction of that (figures in bench/BENCHMARKS.md).

A connection goes back to the pool only after its response was read to the end. A pooled
connection that the engine closed while it sat idle fails before any byte of an answer: that
request is sent once more on a new connection (the engine never saw it).

Generations, token counts and embeddings are capped at ``max_connections`` at once; health
probes and info calls are not counted against that cap, so an engine busy with the most
streams we allow still answers them.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar, cast
from urllib.parse import urlsplit

import msgspec

from engine.errors import EngineError, EngineUnavailableError
from engine.serving.engine_link import EngineLink, error_of, time_out
from engine.serving.protocol import (
    DeltaFrame,
    EmbedRequest,
    EmbedResult,
    EngineInfo,
    ErrorEvent,
    GenerateRequest,
    TokenCount,
)

_encoder = msgspec.json.Encoder()
_Answer = TypeVar("_Answer", TokenCount, EmbedResult)
_MAX_IDLE = 256
_MAX_CONNECTIONS = 1024
_MAX_HEAD_BYTES = 65536
_PAUSE_READING_BYTES = 1 << 20
_MAX_STREAM_BYTES = 8 << 20
_PROBE_TIMEOUT_S = 5.0
_HEALTH_TIMEOUT_S = 2.0
# What a broken, silent or garbled engine connection raises while we talk to it.
_TRANSPORT_ERRORS = (OSError, EOFError, TimeoutError, ValueError)


def _refusal(status: int, body: bytes) -> EngineError:
    try:
        return error_of(msgspec.json.decode(body, type=ErrorEvent))
    except msgspec.MsgspecError:
        return EngineUnavailableError(f"engine answered {status}")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: received bytes collect in ``buffer`` for the response parser."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.error: BaseException | None = None
        """Set once the connection ended (EOF, reset): no more bytes will arrive."""
        self.num_received = 0
        """Bytes received since the last request was written."""
        self._waiter: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._is_reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        self._closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.num_received += len(data)
        if len(self.buffer) > _PAUSE_READING_BYTES and self.transport is not None:
            self.transport.pause_reading()
            self._is_reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self._end(EOFError("the engine closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or EOFError("the engine connection was closed"))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    @property
    def is_reusable(self) -> bool:
        return self.error is None and not self.buffer and self.transport is not None

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.num_received = 0
        self.transport.write(data)

    def consume(self, num_bytes: int, *, skip: int = 0, then_skip: int = 0) -> bytes:
        """Take ``num_bytes`` of the buffer after dropping ``skip``, then drop ``then_skip`` more."""
        taken = bytes(self.buffer[skip : skip + num_bytes])
        del self.buffer[: skip + num_bytes + then_skip]
        if self._is_reading_paused and len(self.buffer) < _PAUSE_READING_BYTES // 2:
            self._is_reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        return taken

    async def receive(self, timeout_s: float) -> None:
        """Wait until more bytes arrived; raises if the connection ended or stayed silent too long."""
        if self.error is not None:
            raise self.error
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(timeout_s, time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def aclose(self) -> None:
        """Close and wait until the socket is gone, so the engine sees the end at once."""
        if self.transport is not None:
            self.transport.close()
        if self._closed is not None:
            await asyncio.shield(self._closed)

    def abort(self, reason: str) -> None:
        """End the connection now: a reader waiting on it fails at once instead of at its timeout."""
        self._end(EOFError(reason))
        if self.transport is not None:
            self.transport.abort()

    def _end(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _Response:
    """Status and headers of one answer; the body is read through ``read`` or ``lines``."""

    def __init__(self, conn: _Connection, head: bytes, read_timeout_s: float) -> None:
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        version, status, *_ = status_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.status = int(status)
        self.conn = conn
        self._timeout_s = read_timeout_s
        self._is_chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._length = int(length) if length is not None and not self._is_chunked else None
        self.media_type = headers.get("content-type", "")
        self.is_complete = False
        self.is_reusable = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"

    async def read(self) -> bytes:
        if self._is_chunked:
            pieces = []
            while (piece := await self._next_chunk()) is not None:
                pieces.append(piece)
            body = b"".join(pieces)
        elif self._length is not None:
            body = await self._exactly(self._length)
        else:
            self.is_reusable = False  # the body ends where the connection does
            while self.conn.error is None:
                await self.conn.receive(self._timeout_s)
            body = self.conn.consume(len(self.conn.buffer))
        self.is_complete = True
        return body

    async def _next_chunk(self) -> bytes | None:
        """The next chunk of a chunked body; None after the last (and its trailers)."""
        conn = self.conn
        while (eol := conn.buffer.find(b"\r\n")) < 0:
            await conn.receive(self._timeout_s)
        size = int(conn.buffer[:eol].split(b";", 1)[0], 16)
        if size == 0:
            conn.consume(eol + 2)
            while (eol := conn.buffer.find(b"\r\n")) != 0:  # trailers end with an empty line
                if eol > 0:
                    conn.consume(eol + 2)
                else:
                    await conn.receive(self._timeout_s)
            conn.consume(2)
            return None
        while len(conn.buffer) < eol + 2 + size + 2:
            await conn.receive(self._timeout_s)
        return conn.consume(size, skip=eol + 2, then_skip=2)

    async def _exactly(self, num_bytes: int) -> bytes:
        while len(self.conn.buffer) < num_bytes:
            await self.conn.receive(self._timeout_s)
        return self.conn.consume(num_bytes)


class EngineClient:
    """Talks to one engine instance. Safe to share between concurrent requests."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = _MAX_CONNECTIONS,
        max_stream_bytes: int = _MAX_STREAM_BYTES,
    ):
        """``ssl_context`` for an https URL: the CAs that sign the engine's certificate and our client
        certificate (mutual TLS); None verifies against the system's CAs and presents none.
        ``max_connections``: generations and token counts at once (more wait for a slot).
        ``max_stream_bytes``: how far a generation's reader may fall behind the engine before the
        generation is aborted (``engine.serving.engine_link``)."""
        self.base_url = base_url.rstrip("/")
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"engine URL {base_url!r} is not http(s)://host[:port]")
        if any(c in token for c in "\r\n"):
            raise ValueError("the engine token must not contain line breaks")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        if url.scheme == "https":
            self._ssl: ssl.SSLContext | None = ssl_context or ssl.create_default_context()
        else:
            self._ssl = None
        self._path_prefix = url.path
        self._common_headers = f"host: {url.netloc}\r\nauthorization: Bearer {token}\r\n".encode("latin-1")
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        """Connections carrying a request now (so ``reset`` can end them)."""
        self._slots = asyncio.Semaphore(max_connections)
        self._is_closed = False
        self._token = token
        self._max_stream_bytes = max_stream_bytes
        self._link: EngineLink | None = None
        self._link_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"EngineClient({self.base_url!r})"

    async def aclose(self) -> None:
        self._is_closed = True
        link, self._link = self._link, None
        if link is not None:
            await link.aclose()
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()

    def reset(self, reason: str) -> None:
        """Abort every connection, idle or carrying a request: the engine was found dead or hung.

        Requests in flight fail with EngineUnavailableError now (a 503, or an error event ending
        the stream) rather than when their read timeout runs out; the next call connects anew."""
        link, self._link = self._link, None
        if link is not None:
            link.reset(reason)
        idle, self._idle = self._idle, []
        for conn in [*idle, *self._busy]:
            conn.abort(reason)

    async def info(self) -> EngineInfo:
        try:
            status, body = await self._get("/engine/v1/info", _PROBE_TIMEOUT_S)
        except _TRANSPORT_ERRORS as exc:
            raise EngineUnavailableError(f"engine {self.base_url} unreachable: {type(exc).__name__}") from exc
        if status != 200:
            raise EngineUnavailableError(f"engine {self.base_url} answered {status}")
        try:
            return msgspec.json.decode(body, type=EngineInfo)
        except msgspec.MsgspecError as exc:
            raise EngineUnavailableError(f"engine {self.base_url} sent an unreadable info: {exc}") from None

    async def is_ready(self, timeout_s: float = _HEALTH_TIMEOUT_S) -> bool:
        try:
            status, _ = await self._get("/engine/v1/health", timeout_s)
        except _TRANSPORT_ERRORS:
            return False
        return status == 200

    @asynccontextmanager
    async def generate(self, request: GenerateRequest) -> AsyncIterator[AsyncIterator[DeltaFrame]]:
        """Open a generation: its frames, each every delta the engine had for it then (at most one
        per completion index). A refusal raises at the first frame. Leaving the ``async with``
        early aborts it in the engine."""
        async with self._slots:
            link = await self._open_link()
            stream = link.open(request)
            try:
                yield stream.frames()
            finally:
                link.close_stream(stream)

    async def _open_link(self) -> EngineLink:
        """The link, connected on first use and again after it ended; one connect at a time."""
        link = self._link
        if link is not None and link.is_open:
            return link
        async with self._link_lock:
            link = self._link
            if link is not None and link.is_open:
                return link
            try:
                link = await EngineLink.connect(
                    self.base_url,
                    self._token,
                    self._host,
                    self._port,
                    ssl_context=self._ssl,
                    timeout_s=self._connect_timeout_s,
                    read_timeout_s=self._read_timeout_s,
                    max_stream_bytes=self._max_stream_bytes,
                )
            except _TRANSPORT_ERRORS as exc:
                raise EngineUnavailableError(f"engine {self.base_url} failed: {type(exc).__name__}") from exc
            if self._is_closed:
                await link.aclose()
                raise EngineUnavailableError(f"engine client {self.base_url} is closed")
            self._link = link
            return link

    async def count_tokens(self, request: GenerateRequest) -> int:
        """The prompt tokens ``request`` would have in this engine: its model's own chat template
        and tokenizer, counted before anything is reserved or queued."""
        async with self._slots:
            link = await self._open_link()
            return await link.count(request)

    async def count_embedding_tokens(self, request: EmbedRequest) -> int:
        """The input tokens ``embed`` will take for ``request``; nothing is queued."""
        return (await self._call("/engine/v1/embed/tokens", request, TokenCount)).num_tokens

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """Every input's vector, in input order."""
        return await self._call("/engine/v1/embed", request, EmbedResult)

    async def _call(
        self, path: str, request: GenerateRequest | EmbedRequest, answer: type[_Answer]
    ) -> _Answer:
        """One request, one JSON answer."""
        async with self._slots:
            try:
                resp = await self._send("POST", path, _encoder.encode(request))
                try:
                    body = await resp.read()
                finally:
                    await self._finish(resp)
            except _TRANSPORT_ERRORS as exc:
                raise EngineUnavailableError(f"engine {self.base_url} failed: {type(exc).__name__}") from exc
        if resp.status != 200:
            raise _refusal(resp.status, body)
        try:
            return msgspec.json.decode(body, type=answer)
        except msgspec.MsgspecError:
            raise EngineUnavailableError(
                f"engine {self.base_url} sent an unreadable {answer.__name__}"
            ) from None

    async def _get(self, path: str, timeout_s: float) -> tuple[int, bytes]:
        """A control call (health, info): no generation slot, and ``timeout_s`` bounds all of it."""
        async with asyncio.timeout(timeout_s):
            resp = await self._send("GET", path, None)
            try:
                return resp.status, await resp.read()
            finally:
                await self._finish(resp)

    async def _send(self, method: str, path: str, body: bytes | None) -> _Response:
        head = f"{method} {self._path_prefix}{path} HTTP/1.1\r\n".encode() + self._common_headers
        if body is not None:
            head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
        data = head + b"\r\n" + (body or b"")
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_reusable:
                await conn.aclose()
                continue
            try:
                return await self._exchange(conn, data)
            except (OSError, EOFError) as exc:
                if isinstance(exc, TimeoutError) or conn.num_received:
                    raise  # the engine has (or may have) seen this request: never send it twice
        return await self._exchange(await self._connect(), data)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout_s):
            _, conn = await loop.create_connection(
                _Connection,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl else None,
            )
        return conn

    async def _exchange(self, conn: _Connection, data: bytes) -> _Response:
        self._busy.add(conn)
        try:
            conn.send(data)
            while (end := conn.buffer.find(b"\r\n\r\n")) < 0:
                if len(conn.buffer) > _MAX_HEAD_BYTES:
                    raise ValueError("the engine's response head is too large")
                await conn.receive(self._read_timeout_s)
            return _Response(conn, conn.consume(end, then_skip=4), self._read_timeout_s)
        except BaseException:
            self._busy.discard(conn)
            await conn.aclose()
            raise

    async def _finish(self, resp: _Response) -> None:
        """Pool the connection if its answer was read to the end, else close it (aborts a stream)."""
        self._busy.discard(resp.conn)
        reusable = resp.is_complete and resp.is_reusable and resp.conn.is_reusable
        if reusable and not self._is_closed and len(self._idle) < _MAX_IDLE:
            self._idle.append(resp.conn)
        else:
            await resp.conn.aclose()
