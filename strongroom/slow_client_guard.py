"""uvicorn's HTTP protocol with the read deadlines and connection caps it lacks.

uvicorn arms no timer until a connection's first response is sent, and every byte received
cancels its keep-alive timer, so a client that sends its headers one byte at a time (slowloris)
or its body one byte at a time holds the connection for ever. This protocol adds, per
connection::

    accept ─ cap check (total, per client IP) ─▶ 503 / 429 and close
      │
      ▼  header deadline: from the connection's start, or a kept-alive request's first byte
    request line + headers ─ too slow ─▶ 408, close │ larger than max_head_bytes ─▶ 431, close
      │
      ▼  body deadline: from the end of the headers
    body ─ too slow ─▶ 408 (if no response started yet), close
      │
      ▼  the app answers; idle kept-alive connections close after keep_alive_timeout_s (uvicorn)

Long answers (a ten-minute stream) run under no deadline of ours: the deadlines cover only what
the client sends. Not covered here: a TLS handshake, which uvicorn leaves to the event loop; it is
bounded by the loop's own handshake timeout (60 s) and counted against the caps once complete.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_remote_addr

from gateway.listener_config import ConnectionLimits

__all__ = ["ConnectionCounts", "SlowClientGuard", "guarded_protocol"]


def _refusal(status: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


_TOO_MANY = _refusal(b"503 Service Unavailable")
_TOO_MANY_FROM_CLIENT = _refusal(b"429 Too Many Requests")
_TOO_SLOW = _refusal(b"408 Request Timeout")
_HEAD_TOO_LARGE = _refusal(b"431 Request Header Fields Too Large")


class ConnectionCounts:
    """Open connections of one listener, in total and per client IP (one event loop: no lock)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self._limits = limits
        self._by_client: dict[str, int] = {}
        self.num_open = 0

    def admit(self, client: str) -> bytes | None:
        """Count a new connection, or return the answer that refuses it."""
        if self.num_open >= self._limits.max_connections:
            return _TOO_MANY
        cap = self._limits.max_connections_per_client
        num_client = self._by_client.get(client, 0)
        if cap and num_client >= cap:
            return _TOO_MANY_FROM_CLIENT
        self._by_client[client] = num_client + 1
        self.num_open += 1
        return None

    def release(self, client: str) -> None:
        self.num_open -= 1
        remaining = self._by_client[client] - 1
        if remaining:
            self._by_client[client] = remaining
        else:
            del self._by_client[client]


class SlowClientGuard(HttpToolsProtocol):
    """Use through ``guarded_protocol``, which binds the limits and the listener's counts."""

    limits: ClassVar[ConnectionLimits]
    counts: ClassVar[ConnectionCounts]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client: str | None = None
        """The client IP once admitted (counted); None for a refused connection."""
        self._deadline: asyncio.TimerHandle | None = None
        self._is_reading_head = False
        self._num_head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = get_remote_addr(transport)
        client = peer[0] if peer else ""
        refusal = self.counts.admit(client)
        if refusal is not None:
            transport.write(refusal)
            transport.close()
            return
        self._client = client
        super().connection_made(transport)
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._client is None:
            return  # refused in connection_made: uvicorn never saw it
        self.counts.release(self._client)
        self._client = None
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._is_reading_head:
            self._num_head_bytes += len(data)
        super().data_received(data)
        if self._is_reading_head and self._num_head_bytes > self.limits.max_head_bytes:
            self._close_with(_HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._is_reading_head:
            self._start_head()

    def on_headers_complete(self) -> None:
        self._is_reading_head = False
        self._arm(self.limits.body_timeout_s, self._on_body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        """uvicorn hands an upgraded connection (the engine link) to a WebSocket protocol and this
        one hears nothing more: no deadline of ours may cut it, and the count is given back when
        that protocol's connection ends, not never."""
        self._disarm()
        self._is_reading_head = False
        super().handle_websocket_upgrade()
        client, self._client = self._client, None
        upgraded = self.transport.get_protocol()
        ends = upgraded.connection_lost
        counts = self.counts

        def connection_lost(exc: Exception | None) -> None:
            if client is not None:
                counts.release(client)
            ends(exc)

        upgraded.connection_lost = connection_lost  # type: ignore[method-assign]

    def _start_head(self) -> None:
        self._is_reading_head = True
        self._num_head_bytes = 0
        self._arm(self.limits.header_timeout_s, self._on_head_timeout)

    def _arm(self, delay_s: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay_s, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_head_timeout(self) -> None:
        self._deadline = None
        self._close_with(_TOO_SLOW)

    def _on_body_timeout(self) -> None:
        self._deadline = None
        self._close_with(_TOO_SLOW)

    def _close_with(self, answer: bytes) -> None:
        """Answer unless a response is under way (its bytes must not be interleaved), then close;
        uvicorn's connection_lost tells a running app that the client is gone."""
        self._disarm()
        self._is_reading_head = False
        if self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(answer)
        if cycle is not None:
            cycle.keep_alive = False
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[SlowClientGuard]:
    """A protocol class for one listener: its own limits and connection counts."""
    attrs = {"limits": limits, "counts": ConnectionCounts(limits)}
    return cast(type[SlowClientGuard], type("SlowClientGuard", (SlowClientGuard,), attrs))
