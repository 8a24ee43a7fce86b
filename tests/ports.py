"""Loopback ports for servers that a test starts later, by number, in a subprocess or a thread.

A port found with ``bind(("127.0.0.1", 0))`` and closed again is only a guess. Until the server
binds it, the kernel may hand the same number out again: to the next such bind in this process
(CI saw a gateway's gRPC port equal its HTTP port, both chosen that way one after the other), to
another pytest-xdist worker, or as the source port of any outgoing connection. So the ports here
come from outside the kernel's ephemeral range (below it, as a rule), which neither a bind to
port 0 nor an outgoing connection uses; each xdist worker draws from a slice of its own; and a
process never hands out the same port twice.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

_LOWEST, _HIGHEST = 10_000, 65_535
"""Above the well-known ports and the usual fixed service ports (PostgreSQL 5432, Redis 6379)."""
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_RANGE = (32_768, 60_999)
"""Linux's default, for a kernel that does not say."""

_lock = threading.Lock()
_handed_out: set[int] = set()
_cursor: int | None = None


def _ephemeral_range() -> tuple[int, int]:
    try:
        first, last = (int(n) for n in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL_RANGE
    return first, last


def _worker_slice() -> range:
    """This xdist worker's share of the ports outside the ephemeral range (all of it without
    xdist): below the range, or above it where a kernel starts the range low."""
    first, last = _ephemeral_range()
    below, above = range(_LOWEST, max(_LOWEST, first)), range(max(_LOWEST, last + 1), _HIGHEST + 1)
    span = below if len(below) >= len(above) else above
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = len(span) // workers
    if width < 100:
        raise RuntimeError(
            f"the ephemeral port range {first}-{last} leaves too few ports outside it for "
            f"{workers} test workers (net.ipv4.ip_local_port_range)"
        )
    start = span.start + worker * width
    return range(start, start + width)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> tuple[int, ...]:
    """``count`` distinct ports that nothing holds now and that this process has not handed out."""
    global _cursor
    ports: list[int] = []
    with _lock:
        span = _worker_slice()
        cursor = _cursor if _cursor in span else span.start
        for _ in range(len(span)):
            port, cursor = cursor, (span.start if cursor + 1 >= span.stop else cursor + 1)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                ports.append(port)
                if len(ports) == count:
                    _cursor = cursor
                    return tuple(ports)
    raise RuntimeError(f"no {count} free ports left in {span}")


def free_port() -> int:
    """One port, as :func:`free_ports`."""
    return free_ports(1)[0]
