"""A Unix socket only the data directory's user reaches: created 0600, each peer's uid checked.

The operator socket (``audit.writer_socket``) and the workers' feed (``audit.feed_server``) both
listen this way, so a record reaches the audit log only from a process of the owning user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

__all__ = ["addressable", "listen", "peer_uid"]

_STREAM_LIMIT = 1 << 16
"""asyncio's own default line limit for a stream reader."""


@contextlib.contextmanager
def addressable(path: Path) -> Iterator[str]:
    """``path`` short enough for ``sun_path`` (108 bytes): through /proc/self/fd when it is not."""
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


async def listen(
    path: Path,
    serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    *,
    limit: int = _STREAM_LIMIT,
) -> asyncio.Server:
    """Serve ``serve`` at ``path``, replacing a socket file a killed owner left behind."""
    with contextlib.suppress(FileNotFoundError):  # nothing blocking: one unlink of a local file
        os.unlink(path)
    old_umask = os.umask(0o177)  # the socket file is created 0600
    try:
        with addressable(path) as address:
            return await asyncio.start_unix_server(serve, path=address, limit=limit)
    finally:
        os.umask(old_umask)


def peer_uid(writer: asyncio.StreamWriter) -> int:
    """The uid of the process at the other end of a Unix-socket connection."""
    sock: socket.socket = writer.get_extra_info("socket")
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
