"""How a gateway worker appends to the audit log that its supervisor owns: one writer for all.

``strongroom serve`` with several workers keeps a single ``AuditLog`` writer (one chain, one
group commit, one witness) in the supervisor; each worker feeds it over a Unix socket in the
supervisor's private run directory:

    worker: append(entry) --> pending list --(next loop turn)--> one frame, every entry queued
            in that turn --> AuditFeedServer --> AuditLog.append_entry each (the owner's group
            commit batches them with the other workers') --> one reply frame: a seq or an error
            per entry --> each append returns its seq, or raises ``AuditUnavailableError``

    frame = 4-byte big-endian length + msgpack(FeedRequest | FeedReply)

An append returns only once the owner's commit holding the record is durable, so what a worker
answers is in the log (fail closed: a lost connection, an owner error or no reply within the
deadline is a 503). Records are encoded (canonical JSON, index columns) on the worker, so the
owner's event loop only chains and commits. Requests on one connection are answered by id, so
frames from the same worker need not wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from pathlib import Path
from typing import Literal

import msgspec

from audit.chain_writer import Entry
from audit.errors import AuditUnavailableError
from audit.record import AuditContent, EncodedEvent

__all__ = ["AuditFeed", "FeedEntry", "FeedReply", "FeedRequest", "read_frame", "write_frame"]

_log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
_MAX_FRAME = 1 << 30
"""A batch of records with their content; far above anything real, a guard against garbage."""

_STATUS_EVERY_S = 1.0
"""How often an idle worker asks the owner whether appends would succeed (its /readyz answer)."""


class FeedEntry(msgspec.Struct, frozen=True, array_like=True):
    encoded: EncodedEvent
    prompt: str | None
    completion: str | None
    served: bool

    @classmethod
    def of(cls, entry: Entry) -> FeedEntry:
        content = entry.content
        return cls(
            entry.encoded,
            None if content is None else content.prompt,
            None if content is None else content.completion,
            entry.served,
        )

    def entry(self) -> Entry:
        content = None
        if self.prompt is not None or self.completion is not None:
            content = AuditContent(self.prompt or "", self.completion or "")
        return Entry(self.encoded, content, self.served)


class FeedRequest(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    op: Literal["append", "checkpoint", "archive", "status"]
    entries: list[FeedEntry] = []


class FeedReply(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    seqs: list[int] = []
    """Per entry: its sequence number, or 0 where ``errors`` says why not."""
    errors: list[str] = []
    problem: str = ""
    """The owner's ``AuditLog.problem()`` when it answered ("" when appends should succeed)."""
    archived: tuple[int, int, str, str, str] | None = None


_encoder = msgspec.msgpack.Encoder()


async def write_frame(writer: asyncio.StreamWriter, message: FeedRequest | FeedReply) -> None:
    body = _encoder.encode(message)
    writer.write(_HEADER.pack(len(body)) + body)
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > _MAX_FRAME:
        raise ValueError(f"audit feed frame of {size} bytes")
    return await reader.readexactly(size)


class AuditFeed:
    """The worker's side. Same surface as ``GroupCommit`` for ``AuditLog``: append, barrier,
    is_failing, close; plus ``archive``, which the owner runs."""

    def __init__(self, path: Path, *, timeout_s: float) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._queued: list[tuple[Entry, asyncio.Future[int]]] = []
        self._waiting: dict[int, tuple[list[asyncio.Future[int]], asyncio.Future[FeedReply] | None]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._status: asyncio.Task[None] | None = None
        self._problem = ""
        self._is_closed = False
        self._decoder = msgspec.msgpack.Decoder(FeedReply)

    def __repr__(self) -> str:
        return f"AuditFeed({str(self.path)!r}, connected={self._writer is not None})"

    @classmethod
    async def connect(cls, path: Path, *, timeout_s: float) -> AuditFeed:
        """Connect now, so a worker whose owner is unreachable fails its start-up."""
        feed = cls(path, timeout_s=timeout_s)
        await feed._connection()
        feed._status = asyncio.create_task(feed._watch_status())
        return feed

    @property
    def is_failing(self) -> bool:
        """Appends would fail now: no connection to the owner, or the owner says its log fails."""
        return self._is_closed or self._writer is None or bool(self._problem)

    @property
    def problem(self) -> str:
        if self._writer is None:
            return "the audit writer (supervisor) is unreachable"
        return self._problem

    async def append(self, entry: Entry) -> int:
        if self._is_closed:
            raise AuditUnavailableError("audit log is closed")
        future: asyncio.Future[int] = self._loop.create_future()
        if not self._queued:
            self._loop.call_soon(self._flush)
        self._queued.append((entry, future))
        timer = self._loop.call_later(self._timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    async def barrier(self) -> int:
        await self._ask(FeedRequest(id=next(self._ids), op="checkpoint"))
        return 0

    async def archive(self) -> tuple[int, int, str, str, str] | None:
        return (await self._ask(FeedRequest(id=next(self._ids), op="archive"))).archived

    async def close(self) -> None:
        self._is_closed = True
        if self._status is not None:
            self._status.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._status
        if self._writer is not None:
            self._writer.close()
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        self._fail_all(AuditUnavailableError("audit log is closed"))

    # -- sending ---------------------------------------------------------------------------

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        if batch:
            self._loop.create_task(self._send_batch(batch))

    async def _send_batch(self, batch: list[tuple[Entry, asyncio.Future[int]]]) -> None:
        request = FeedRequest(id=next(self._ids), op="append", entries=[FeedEntry.of(e) for e, _ in batch])
        futures = [f for _, f in batch]
        self._waiting[request.id] = (futures, None)
        try:
            writer = await self._connection()
            await write_frame(writer, request)
        except (OSError, AuditUnavailableError) as exc:
            self._waiting.pop(request.id, None)
            _fail(futures, AuditUnavailableError(f"audit writer unreachable: {type(exc).__name__}"))

    async def _ask(self, request: FeedRequest) -> FeedReply:
        """Send a request without entries and wait for its reply (up to the append deadline)."""
        answer: asyncio.Future[FeedReply] = self._loop.create_future()
        self._waiting[request.id] = ([], answer)
        try:
            await write_frame(await self._connection(), request)
            reply = await asyncio.wait_for(answer, self._timeout_s)
        except (OSError, TimeoutError) as exc:
            raise AuditUnavailableError(f"the audit writer did not answer: {type(exc).__name__}") from exc
        finally:
            self._waiting.pop(request.id, None)
        if reply.errors:
            raise AuditUnavailableError(reply.errors[0])
        return reply

    async def _connection(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None:
                if self._is_closed:
                    raise AuditUnavailableError("audit log is closed")
                try:
                    reader, self._writer = await asyncio.open_unix_connection(str(self.path))
                except OSError as exc:
                    raise AuditUnavailableError(f"cannot reach the audit writer at {self.path}") from exc
                self._reading = asyncio.create_task(self._read_replies(reader, self._writer))
            return self._writer

    # -- receiving -------------------------------------------------------------------------

    async def _read_replies(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                reply = self._decoder.decode(await read_frame(reader))
                self._problem = reply.problem
                futures, answer = self._waiting.pop(reply.id, ([], None))
                if answer is not None and not answer.done():
                    answer.set_result(reply)
                for future, seq, error in zip(futures, reply.seqs, reply.errors, strict=True):
                    if future.done():
                        continue
                    if error:
                        future.set_exception(AuditUnavailableError(error))
                    else:
                        future.set_result(seq)
        except (OSError, ValueError, asyncio.IncompleteReadError, msgspec.DecodeError) as exc:
            if not self._is_closed:
                _log.error("audit writer connection lost: %s", type(exc).__name__)
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            # Whatever the owner did not answer may or may not be written: never report it durable.
            self._fail_all(AuditUnavailableError("audit writer connection lost"))

    def _fail_all(self, error: AuditUnavailableError) -> None:
        waiting, self._waiting = self._waiting, {}
        for futures, answer in waiting.values():
            _fail(futures, error)
            if answer is not None and not answer.done():
                answer.set_exception(error)

    async def _watch_status(self) -> None:
        while True:
            await asyncio.sleep(_STATUS_EVERY_S)
            with contextlib.suppress(AuditUnavailableError):
                await self._ask(FeedRequest(id=next(self._ids), op="status"))


def _expire(future: asyncio.Future[int]) -> None:
    # The owner may still write it: a record of a request answered 503 is allowed, the reverse never.
    if not future.done():
        future.set_exception(AuditUnavailableError("the audit writer did not answer in time"))


def _fail(futures: list[asyncio.Future[int]], error: AuditUnavailableError) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(error)
