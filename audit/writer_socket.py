"""How operator commands append to a SQLite log that a gateway owns: through that gateway.

The gateway holds the log's ``WriterLock`` for its lifetime, so a ``strongroom`` command run
beside it (an audited search, a policy change, a key rotation) cannot open the log for writing.
It asks the gateway instead, over a Unix socket next to the database:

    CLI --connect--> <database>.sock   (in the 0700 audit folder; the peer's uid must be ours)
        --> one JSON line   {"op": "append", "event": {...}}  |  {"op": "archive"}
        <-- one JSON line   {"seq": 17}  |  {"archived": [first, last, ...]}  |  {"error": "..."}

Only a process of the user that owns the data directory can connect, and only the records an
operator command makes travel this way (audit access, admin changes, key operations): a local
process cannot pass off an inference or a service record through it. One request per connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from audit.errors import AuditError, AuditUnavailableError
from audit.private_socket import addressable, listen, peer_uid
from common.audit_event import AuditEvent, EventType

if TYPE_CHECKING:
    from audit.log import AuditLog

__all__ = ["WriterReply", "WriterRequest", "WriterSocket", "ask_writer", "socket_path"]

_log = logging.getLogger(__name__)

_MAX_LINE = 1 << 20
"""A request line beyond this is refused (an event is a few KiB)."""

_OPERATOR_EVENTS = frozenset({EventType.AUDIT_ACCESS, EventType.ADMIN_CHANGE, EventType.KEY_OPERATION})
"""What an operator command records; anything else is the gateway's own to write."""

_REPLY_TIMEOUT_S = 60.0
"""An archive can take a while; an append answers within the log's own append timeout."""


class WriterRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    op: Literal["append", "archive"]
    event: AuditEvent | None = None


class WriterReply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    seq: int = 0
    archived: tuple[int, int, str, str, str] | None = None
    """The ``ArchiveEntry`` made by ``archive``, None when nothing was old enough."""
    error: str = ""


def socket_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".sock")


class WriterSocket:
    """The gateway's side: serves appends (and archiving) for operator commands."""

    def __init__(self, log: AuditLog, data_dir: Path, path: Path) -> None:
        self._log = log
        self._data_dir = data_dir
        self.path = path
        self._server: asyncio.Server | None = None

    def __repr__(self) -> str:
        return f"WriterSocket({str(self.path)!r})"

    @classmethod
    async def start(cls, log: AuditLog, db_path: Path, data_dir: Path) -> WriterSocket:
        """Listen at ``socket_path(db_path)``; call only while holding the writer lock."""
        self = cls(log, data_dir, socket_path(db_path))
        # A socket file left by a writer that was killed is replaced: the lock is ours now.
        self._server = await listen(self.path, self._serve, limit=_MAX_LINE)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if peer_uid(writer) != os.getuid():
                return
            reply = await self._answer(await reader.readline())
            writer.write(msgspec.json.encode(reply) + b"\n")
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            _log.warning("audit writer socket: %s", type(exc).__name__)
        finally:
            writer.close()

    async def _answer(self, line: bytes) -> WriterReply:
        try:
            request = msgspec.json.decode(line, type=WriterRequest)
        except msgspec.DecodeError as exc:
            return WriterReply(error=f"bad request: {exc}")
        try:
            if request.op == "append":
                if request.event is None or request.event.event_type not in _OPERATOR_EVENTS:
                    return WriterReply(error="append needs an operator event (audit access, admin, key)")
                return WriterReply(seq=await self._log.append(request.event))
            entry = await self._log.archive(self._data_dir)
            return WriterReply(archived=None if entry is None else tuple(entry))  # type: ignore[arg-type]
        except AuditError as exc:
            return WriterReply(error=f"{type(exc).__name__}: {exc}")


async def ask_writer(db_path: Path, request: WriterRequest) -> WriterReply | None:
    """Send ``request`` to the gateway that writes ``db_path``; None when no gateway listens.

    Raises ``AuditUnavailableError`` when a gateway took the request but did not answer it, or
    answered with an error: the operation must then count as not done.
    """
    path = socket_path(db_path)
    try:
        with addressable(path) as address:
            reader, writer = await asyncio.open_unix_connection(address, limit=_MAX_LINE)
    except OSError:
        # No gateway reachable there (absent, refused, a path that cannot be a socket): the caller
        # opens the log itself, and the writer lock still refuses it if a gateway holds the log.
        return None
    try:
        writer.write(msgspec.json.encode(request) + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), _REPLY_TIMEOUT_S)
        reply = msgspec.json.decode(line, type=WriterReply)
    except (OSError, TimeoutError, msgspec.DecodeError) as exc:
        raise AuditUnavailableError(f"the gateway writing the audit log did not answer: {exc}") from exc
    finally:
        writer.close()
    if reply.error:
        raise AuditUnavailableError(f"the gateway writing the audit log refused: {reply.error}")
    return reply
