"""The newest committed policy version, in shared memory for every process on this host.

A change, once committed, raises the board to its version before the admin call returns; every
authorization check reads the board and refuses to decide on an older table (the authorizer
reloads first). That makes a change in force on every gateway worker, the CLI's and the
console's included, by the time the call that made it returns, for the cost of one 8-byte read
from a mapped page per check (no system call, no round trip; figures in bench/BENCHMARKS.md).

    <file>: 8 bytes, little-endian unsigned: the highest version any process published

The board only ever rises (``raise_to`` takes the maximum under an exclusive ``flock``, so two
changes committed at once through two processes cannot lower it), and a version is published
only after its commit, so the board is never ahead of the store, except after the store was
restored from a backup or replaced: ``settle`` brings it back down when a process opens the store.
It is a page in the host's page cache: processes on other hosts (several gateways on one
PostgreSQL) do not share it; ``PolicyFreshness``'s lease covers them.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["VersionBoard"]

_VERSION = struct.Struct("<Q")


class VersionBoard:
    def __init__(self, path: Path) -> None:
        """Map the board at ``path`` (created, private to this user, at 0 when absent)."""
        self.path = path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._locked() as fd:
            if os.fstat(fd).st_size < _VERSION.size:
                os.ftruncate(fd, _VERSION.size)
            # The map holds its own reference to the file: it lives as long as this object.
            self._map = mmap.mmap(fd, _VERSION.size)

    def __repr__(self) -> str:
        return f"VersionBoard({str(self.path)!r}, version={self.version()})"

    def version(self) -> int:
        """The highest version published on this host (0: none yet)."""
        return int(_VERSION.unpack_from(self._map)[0])

    def raise_to(self, version: int) -> None:
        """Publish ``version`` (committed): the board holds at least it from now on."""
        with self._locked():
            if version > self.version():
                _VERSION.pack_into(self._map, 0, version)

    def settle(self, seen: int, stored: int) -> None:
        """The board read ``seen`` and the store, read after it, holds ``stored`` < ``seen``: the
        store went back (a restore). Lower the board to it, unless someone raised it meanwhile."""
        with self._locked():
            if self.version() == seen and stored < seen:
                _VERSION.pack_into(self._map, 0, stored)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The file, open and exclusively locked: writers are few (one per change), readers never lock."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield fd
            finally:
                # Explicitly: the map made in __init__ shares this open file, and with it the lock.
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
