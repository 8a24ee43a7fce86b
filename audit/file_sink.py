"""A JSON-lines file that satisfies ``AuditSink``: the optional second sink for outage notices."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import msgspec

from audit.errors import AuditUnavailableError
from common.audit_event import AuditEvent


class FileSink:
    """Appends one fsynced line per event; the returned number is the line number."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._num_lines = 0

    def __repr__(self) -> str:
        return f"FileSink({str(self._path)!r})"

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        return await asyncio.to_thread(self._append, event)

    def _append(self, event: AuditEvent) -> int:
        line = msgspec.json.encode(event) + b"\n"
        with self._lock:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise AuditUnavailableError(f"second audit sink: {exc}") from exc
            self._num_lines += 1
            return self._num_lines
