"""The loopback ports tests give the servers they start (tests/ports.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import ports


def test_ports_handed_out_one_after_another_are_never_the_same() -> None:
    # Each port taken by a bind to port 0 and closed again: in five runs of 300 such binds every
    # run had repeats, and CI once got the same port twice in a row (a gateway's HTTP and gRPC).
    handed = [ports.free_port() for _ in range(300)] + list(ports.free_ports(50))
    assert len(set(handed)) == len(handed)


def test_ports_lie_outside_the_kernel_s_ephemeral_range() -> None:
    # Neither a bind to port 0 nor an outgoing connection's source port can take them meanwhile.
    first, last = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert all(p > 1024 and not first <= p <= last for p in ports.free_ports(20))


def test_a_port_something_else_holds_is_passed_over() -> None:
    first = ports.free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 1))
        held.listen(1)
        assert ports.free_port() not in (first, first + 1)


def test_each_test_worker_draws_from_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(ports._worker_slice()))
    assert not (slices[0] & slices[1]) and not (slices[1] & slices[2]) and not (slices[0] & slices[2])
    assert all(len(s) > 1000 for s in slices)


def test_a_kernel_whose_ephemeral_range_starts_low_gets_ports_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: (1024, 40_000))
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert ports._worker_slice() == range(40_001 + 12_767, 40_001 + 2 * 12_767)
