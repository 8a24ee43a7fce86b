from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from policies.policy_freshness import PolicyFreshness
from policies.version_board import VersionBoard


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_lease_only_the_board_can_make_a_version_stale(tmp_path: Path) -> None:
    board = VersionBoard(tmp_path / "b")
    clock = Clock()
    fresh = PolicyFreshness(board, lease_s=0, clock=clock)
    clock.now += 1e6
    assert fresh.is_current(1)
    fresh.publish(2)
    assert not fresh.is_current(1) and fresh.is_current(2)
    assert "version 2 is committed; this replica holds 1" in fresh.why_not_current(1)


def test_a_lease_runs_from_the_start_of_the_read_that_confirmed_it() -> None:
    clock = Clock()
    fresh = PolicyFreshness(None, lease_s=1.0, clock=clock)
    assert not fresh.is_current(1)  # nothing confirmed yet
    started = fresh.now()
    clock.now += 0.3  # the read took 0.3 s: the lease still counts from its start
    fresh.confirm(started)
    clock.now = started + 0.99
    assert fresh.is_current(1)
    clock.now = started + 1.0
    assert not fresh.is_current(1)
    assert "could not be confirmed current" in fresh.why_not_current(1)
    fresh.confirm(started - 5)  # a late answer to an older read never shortens or extends it
    assert not fresh.is_current(1)


def test_a_change_waits_out_the_lease_from_its_commit() -> None:
    fresh = PolicyFreshness(None, lease_s=0.2)

    async def run() -> float:
        committed = fresh.now()
        await fresh.wait_out_leases(committed)
        return fresh.now() - committed

    assert asyncio.run(run()) >= 0.2 * 1.01


def test_a_negative_lease_is_refused() -> None:
    with pytest.raises(ValueError, match="lease_s"):
        PolicyFreshness(None, lease_s=-1)
