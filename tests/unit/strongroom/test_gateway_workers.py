"""The workers' listening sockets: one SO_REUSEPORT group per ``serve``, never joined by another."""

from __future__ import annotations

import socket

import pytest

from strongroom.gateway_workers import listening_sockets


def test_each_worker_gets_its_own_socket_on_the_one_port_and_a_second_serve_is_refused() -> None:
    socks = listening_sockets("127.0.0.1", 0, 3)
    try:
        port = socks[0].getsockname()[1]
        assert [s.getsockname() for s in socks] == [("127.0.0.1", port)] * 3
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in socks)
        with pytest.raises(OSError):  # another serve of the same user must not share the traffic
            listening_sockets("127.0.0.1", port, 2)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        for s in socks:
            s.close()
