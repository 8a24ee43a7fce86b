"""Security operations run from a shell, recorded in the log that a running gateway owns.

The gateway is the only writer of its audit store. While it runs it listens on a Unix socket in
its data directory (0600, and only its own OS user, or root, is served); a CLI command sends its
events there and the gateway appends them. The operator's identity (OS user and host) is what
the kernel reports for the connection (``SO_PEERCRED``), never what the client claims. With no
gateway listening the command writes to the log itself (``AuditLog.open`` fails clearly if some
other process holds the store).

    CLI     --> one JSON line   {"events": [AuditEvent, ...]}
    gateway <-- one JSON line   {"seqs": [int, ...]}  or  {"error": "..."}

Only key operations and admin changes travel this way: a local process cannot forge inference
or access records through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import pwd
import socket
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from audit.config import AuditConfig
from audit.errors import AuditError, AuditUnavailableError
from audit.event import AuditEvent, EventType
from audit.sink import AuditSink

__all__ = ["OperatorChannel", "OperatorSink", "local_identity", "operator_event", "record_operations"]

_log = logging.getLogger(__name__)
_MAX_LINE = 1 << 20
_TIMEOUT_S = 30.0
_OPERATIONS = frozenset({EventType.KEY_OPERATION, EventType.ADMIN_CHANGE})


class _Request(msgspec.Struct, frozen=True):
    events: list[AuditEvent]


class _Reply(msgspec.Struct, frozen=True, omit_defaults=True):
    seqs: list[int] = []
    error: str = ""


def operator_event(event: AuditEvent, identity: str) -> AuditEvent:
    """``event`` as done by ``identity`` (``user@host``) from the CLI: it is the subject unless the
    event names its own actor (a policy change's ``--actor``), and always the client app."""
    return msgspec.structs.replace(event, subject=event.subject or identity, client_app=f"cli:{identity}")


def _identity(uid: int) -> str:
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"uid{uid}"
    return f"{user}@{socket.gethostname()}"


def local_identity() -> str:
    try:
        return _identity(os.getuid())
    except OSError:
        return f"{getpass.getuser()}@{socket.gethostname()}"


@contextlib.contextmanager
def _reachable(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits ``sun_path`` (108 bytes): long ones go through /proc/self/fd."""
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class OperatorChannel:
    """The gateway's side: serves the socket for as long as the gateway runs."""

    def __init__(self, sink: AuditSink, path: Path, server: asyncio.AbstractServer) -> None:
        self._sink = sink
        self.path = path
        self._server = server

    @classmethod
    async def start(cls, sink: AuditSink, path: Path) -> OperatorChannel | None:
        """Listen on ``path``; None (logged) when another live process already serves it."""
        if _has_socket_file(path):
            if await _is_served(path):
                _log.warning("operator socket %s is served by another process; not serving it", path)
                return None
            _remove(path)
        channel: OperatorChannel | None = None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert channel is not None
            await channel._serve(reader, writer)

        old_umask = os.umask(0o177)
        try:
            with _reachable(path) as name:
                server = await asyncio.start_unix_server(handle, path=name, limit=_MAX_LINE)
        except OSError as exc:
            # The gateway serves without it; CLI security operations then fail closed meanwhile.
            _log.error("cannot serve the operator socket %s: %s", path, exc)
            return None
        finally:
            os.umask(old_umask)
        channel = cls(sink, path, server)
        return channel

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()
        _remove(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            reply = await self._answer(writer, await asyncio.wait_for(reader.readline(), _TIMEOUT_S))
            writer.write(msgspec.json.encode(reply) + b"\n")
            await writer.drain()
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, writer: asyncio.StreamWriter, line: bytes) -> _Reply:
        uid = _peer_uid(writer)
        if uid is None or uid not in (os.getuid(), 0):
            return _Reply(error="not allowed: the gateway's own OS user or root only")
        try:
            request = msgspec.json.decode(line, type=_Request)
        except msgspec.DecodeError:
            return _Reply(error="malformed request")
        if not request.events or any(e.event_type not in _OPERATIONS for e in request.events):
            return _Reply(error="only key operations and admin changes are accepted")
        identity = _identity(uid)
        seqs = []
        try:
            for event in request.events:
                seqs.append(await self._sink.append(operator_event(event, identity)))
        except AuditError as exc:
            return _Reply(seqs=seqs, error=f"{type(exc).__name__}: {exc}")
        return _Reply(seqs=seqs)


def _has_socket_file(path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path.exists()


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return int(uid)


async def _is_served(path: Path) -> bool:
    try:
        with _reachable(path) as name:
            _, writer = await asyncio.open_unix_connection(name)
    except OSError:
        return False
    writer.close()
    return True


async def record_operations(cfg: AuditConfig, data_dir: Path, events: Sequence[AuditEvent]) -> list[int]:
    """Record a CLI's security operations; returns their sequence numbers once durable.

    Through the running gateway when one serves this data directory, else straight into the log.
    Raises ``AuditUnavailableError`` when they cannot be recorded either way.
    """
    identity = local_identity()
    return await _deliver(cfg, data_dir, [operator_event(e, identity) for e in events])


async def _deliver(cfg: AuditConfig, data_dir: Path, events: list[AuditEvent]) -> list[int]:
    """The transport alone: the gateway's socket, or the log itself when no gateway listens."""
    path = cfg.resolve(data_dir, cfg.operator_socket)
    try:
        with _reachable(path) as name:
            reader, writer = await asyncio.open_unix_connection(name, limit=_MAX_LINE)
    except (FileNotFoundError, ConnectionRefusedError):
        return await _append_directly(cfg, data_dir, events)
    except OSError as exc:
        raise AuditUnavailableError(f"cannot reach the gateway's operator socket {path}: {exc}") from exc
    try:
        writer.write(msgspec.json.encode(_Request(events=events)) + b"\n")
        await writer.drain()
        reply = msgspec.json.decode(await asyncio.wait_for(reader.readline(), _TIMEOUT_S), type=_Reply)
    except (OSError, TimeoutError, msgspec.DecodeError) as exc:
        raise AuditUnavailableError(f"the gateway did not confirm the audit record: {exc}") from exc
    finally:
        writer.close()
    if reply.error:
        raise AuditUnavailableError(f"the gateway refused the audit record: {reply.error}")
    return reply.seqs


async def _append_directly(cfg: AuditConfig, data_dir: Path, events: list[AuditEvent]) -> list[int]:
    from audit.log import AuditLog

    log = await AuditLog.open(cfg, data_dir, heartbeat=False, record_lifecycle=False)
    try:
        return [await log.append(event) for event in events]
    finally:
        await log.close()


class OperatorSink:
    """An ``AuditSink`` for CLI commands: each append is one ``record_operations`` call.

    Works from any event loop (the key functions run their own ``asyncio.run`` per batch).
    """

    def __init__(self, cfg: AuditConfig, data_dir: Path) -> None:
        self._cfg = cfg
        self._data_dir = data_dir

    async def append(self, event: AuditEvent) -> int:
        [seq] = await record_operations(self._cfg, self._data_dir, [event])
        return seq
