"""When a replica may still decide on the policy version it holds: the rule behind "a change is
in force everywhere by the time the call that made it returns".

Two guarantees, for two reaches:

- **this host** — the ``VersionBoard``: a committed change is published on the board before the
  call returns, and a replica whose table is older than the board does not decide (it reloads
  first). One read from shared memory per check.
- **other hosts** (gateways on one PostgreSQL) — a lease: a replica decides on its version only
  until ``lease_s`` after the start of the last store read that found nothing newer, and the
  call that made a change waits ``lease_s`` after its commit before it returns::

      replica B:  read starts t0 (finds v) ─────────── decides on v until t0 + lease_s
      replica A:                  commit v+1 at tc > t0 ── waits until tc + lease_s ── returns

  Any decision on v after A returns would need t0 + lease_s > tc + lease_s, i.e. a read that
  started after the commit and still found v: impossible. A replica's polls renew its lease
  every ``access.poll_interval_s``; one that cannot reach the store stops deciding once its
  lease runs out (fail closed) instead of serving a policy that may have been revoked.

Both checks cost a request nothing but two comparisons; the price is paid by the rare change
(it waits ``lease_s`` where other hosts share the store) instead of by every request (a Redis or
database round trip per decision). ``lease_s = 0`` turns the lease off: every replica shares
this host's board (SQLite, replicas on one host).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from policies.version_board import VersionBoard

__all__ = ["PolicyFreshness"]

_CLOCK_RATE_MARGIN = 0.01
"""Monotonic clocks of two hosts may run at slightly different rates (NTP slews by up to
500 ppm): the changing call waits this share longer than the lease."""


class PolicyFreshness:
    def __init__(
        self,
        board: VersionBoard | None,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``board`` None: the replicas of this process only (tests, a one-off tool)."""
        if lease_s < 0:
            raise ValueError("lease_s must be >= 0")
        self.board = board
        self.lease_s = lease_s
        self._clock = clock
        self._confirmed_until = -math.inf if lease_s else math.inf

    def now(self) -> float:
        """The clock a confirmation is dated by: read it *before* the store read it confirms."""
        return self._clock()

    def is_current(self, version: int) -> bool:
        """Whether a table at ``version`` may decide now."""
        if self.board is not None and self.board.version() > version:
            return False
        return self._clock() < self._confirmed_until

    def why_not_current(self, version: int) -> str:
        """Why ``is_current(version)`` is false, for the error a refused request carries."""
        newest = self.board.version() if self.board is not None else version
        if newest > version:
            return f"policy version {newest} is committed; this replica holds {version} and has not loaded it"
        return f"policy version {version} could not be confirmed current: the policy store did not answer"

    def confirm(self, read_started_s: float) -> None:
        """A store read that started at ``read_started_s`` found no version newer than the table's
        (or this replica loaded it): the table may decide until ``lease_s`` after that start."""
        if self.lease_s:
            self._confirmed_until = max(self._confirmed_until, read_started_s + self.lease_s)

    def publish(self, version: int) -> None:
        """``version`` is committed: no replica on this host decides on an older one from now on."""
        if self.board is not None:
            self.board.raise_to(version)

    async def wait_out_leases(self, committed_s: float) -> None:
        """Return once every other host's lease on a version before a commit that had returned by
        ``committed_s`` has run out."""
        if not self.lease_s:
            return
        until = committed_s + self.lease_s * (1 + _CLOCK_RATE_MARGIN)
        remaining = until - self._clock()
        if remaining > 0:
            await asyncio.sleep(remaining)
