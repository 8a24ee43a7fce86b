"""A syslog witness: each signed checkpoint as one message to a local socket or a remote collector.

Publish-only (``verify`` cannot read a collector back): it puts a copy of every checkpoint in
the SIEM, out of reach of whoever owns the audit store, for an auditor to compare with
``strongroom audit verify``'s output. Messages are RFC 3164 with facility ``auth``; the body is
the checkpoint's JSON, whose signature anyone with the public key can check. UDP can drop a
message: the next checkpoint (at most ``checkpoint_interval_s`` later) carries the chain on.
"""

from __future__ import annotations

import os
import socket
import threading

import msgspec

from audit.checkpoint import Checkpoint

_PRIORITY = 4 * 8 + 5
"""Facility auth (4), severity notice (5)."""


class SyslogWitness:
    def __init__(self, address: str) -> None:
        """``address``: a Unix datagram socket path (``/dev/log``) or ``host:port`` (UDP)."""
        self._address = address
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def __repr__(self) -> str:
        return f"SyslogWitness({self._address!r})"

    def publish(self, checkpoint: Checkpoint) -> None:
        body = msgspec.json.encode(checkpoint).decode()
        message = f"<{_PRIORITY}>strongroom-audit[{os.getpid()}]: checkpoint {body}".encode()
        with self._lock:
            if self._socket is None:
                self._socket = _connect(self._address)
            try:
                self._socket.send(message)
            except OSError:
                self._socket.close()
                self._socket = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


def _connect(address: str) -> socket.socket:
    if address.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        target: str | tuple[str, int] = address
    else:
        host, _, port = address.rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        target = (host.strip("[]"), int(port))
    try:
        sock.connect(target)
    except OSError:
        sock.close()
        raise
    return sock
