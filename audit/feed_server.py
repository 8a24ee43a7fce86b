"""The owner's side of the audit feed (``audit.feed``): the one writer that every worker feeds.

Each connection is read in order; each append frame is handed to the log entry by entry, all
queued before the first is awaited, so one frame lands in one group commit (with whatever the
other workers sent meanwhile). Replies go back as each frame's commit resolves; a frame does
not wait for the one before it. The socket lives in the supervisor's private (0700) run
directory, is created 0600, and a peer of another user is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from audit.errors import AuditError
from audit.feed import FeedReply, FeedRequest, read_frame, write_frame
from audit.private_socket import listen, peer_uid

if TYPE_CHECKING:
    from audit.log import AuditLog

__all__ = ["AuditFeedServer"]

_log = logging.getLogger(__name__)


class AuditFeedServer:
    def __init__(self, log: AuditLog, data_dir: Path, path: Path) -> None:
        self._log = log
        self._data_dir = data_dir
        self.path = path
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.StreamWriter] = set()
        self._decoder = msgspec.msgpack.Decoder(FeedRequest)

    def __repr__(self) -> str:
        return f"AuditFeedServer({str(self.path)!r})"

    @classmethod
    async def start(cls, log: AuditLog, data_dir: Path, path: Path) -> AuditFeedServer:
        self = cls(log, data_dir, path)
        # A socket file left by a supervisor that was killed is replaced.
        self._server = await listen(self.path, self._serve)
        return self

    async def close(self) -> None:
        """Stop listening; answers already being committed still go out."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._connections:
            writer.close()  # ends each connection's read loop
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if peer_uid(writer) != os.getuid():
            writer.close()
            return
        sending = asyncio.Lock()
        self._connections.add(writer)
        try:
            while True:
                request = self._decoder.decode(await read_frame(reader))
                task = asyncio.create_task(self._answer(request, writer, sending))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (OSError, ValueError, asyncio.IncompleteReadError, msgspec.DecodeError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError) or exc.partial:
                _log.warning("audit feed connection: %s", type(exc).__name__)
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(
        self, request: FeedRequest, writer: asyncio.StreamWriter, sending: asyncio.Lock
    ) -> None:
        reply = await self._reply(request)
        async with sending:
            with contextlib.suppress(OSError):  # the worker died: it answered nobody with these
                await write_frame(writer, reply)

    async def _reply(self, request: FeedRequest) -> FeedReply:
        log = self._log
        if request.op == "append":
            # Every entry is queued before the writer can take one: one frame, one group commit.
            results = await log.append_entries([e.entry() for e in request.entries])
            seqs = [r if isinstance(r, int) else 0 for r in results]
            errors = ["" if isinstance(r, int) else _message(r) for r in results]
            return FeedReply(id=request.id, seqs=seqs, errors=errors, problem=log.problem())
        try:
            if request.op == "checkpoint":
                await log.checkpoint()
            elif request.op == "archive":
                entry = await log.archive(self._data_dir)
                return FeedReply(
                    id=request.id,
                    archived=None if entry is None else tuple(entry),  # type: ignore[arg-type]
                    problem=log.problem(),
                )
        except AuditError as exc:
            return FeedReply(id=request.id, errors=[_message(exc)], problem=log.problem())
        return FeedReply(id=request.id, problem=log.problem())


def _message(exc: BaseException) -> str:
    if isinstance(exc, AuditError):
        return f"{type(exc).__name__}: {exc}"
    _log.error("audit feed append failed: %s", type(exc).__name__)
    return "audit append failed"
