"""The SQLite audit log's single-writer lock: one process appends, everyone else only reads.

An exclusive ``flock`` on ``<database>.lock``, taken before the store's first connection and
held until it closes; the kernel drops it when the process dies, so a SIGKILLed gateway never
blocks the next start. ``flock`` locks belong to the open file description, unlike the POSIX
record locks SQLite uses on the database itself, which Linux drops when *any* descriptor of
the file closes in the process (SQLite's "How To Corrupt" page). So this lock says who the
writer is, and nothing here may open and close a descriptor of the database or its WAL.

The file holds the writer's pid, for the message another process gets when it is refused.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from audit.errors import AuditWriterBusyError

__all__ = ["WriterLock", "lock_path"]

_POLL_S = 0.02
"""How often a waiting writer tries the lock again (``flock`` has no timeout of its own)."""


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


class WriterLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"WriterLock({str(self.path)!r}, held={self._fd is not None})"

    @classmethod
    def acquire(cls, db_path: Path, *, wait_s: float = 0.0) -> WriterLock:
        """Take the lock, waiting up to ``wait_s``; else ``AuditWriterBusyError`` naming the holder."""
        path = lock_path(db_path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(_POLL_S)
                    continue
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise AuditWriterBusyError(
                    f"the audit log {db_path} is written by another process (pid {holder})"
                ) from None
            except OSError:
                os.close(fd)
                raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd)

    @staticmethod
    def is_held(db_path: Path) -> bool:
        """Whether some process writes the log now (a probe: takes and drops the lock if free)."""
        try:
            WriterLock.acquire(db_path).release()
        except AuditWriterBusyError:
            return True
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of this file drops the flock
            self._fd = None
