"""Keeps concurrency slots exactly as long as their requests: renewed while held, freed on return.

A slot is stored with an expiry (``lease_ttl_s`` ahead), so the slot of a replica that died frees
itself. A short TTL alone would free slots of long streams too early; a long one (the old 15
minutes) locked a subject out for that long whenever a release was lost. So:

    reserve ──▶ held: every lease_ttl_s / 3, renew the expiry (only while the slot still exists)
    release ──▶ ZREM; if the limiter is unreachable ──▶ pending: retried every RETRY_S until it
                succeeds, or until the last expiry written has passed (the slot is gone anyway)

After a limiter outage a slot outlives its request by at most RETRY_S plus one round trip; after a
crash, by at most ``lease_ttl_s``. One task per process does the renewing and the retrying, for
every lease, so a request never waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from gateway.quota.backend import QuotaBackend

__all__ = ["LeaseKeeper"]

log = logging.getLogger("strongroom.quota")

RETRY_S = 0.5
"""How often a release that found the limiter unreachable is tried again."""

_Slot = tuple[str, str]  # (in-flight key, lease id)


class LeaseKeeper:
    def __init__(self, backend: QuotaBackend, *, lease_ttl_s: float, clock: Callable[[], float]) -> None:
        self._backend = backend
        self._ttl_s = lease_ttl_s
        self._clock = clock
        self._held: dict[_Slot, float] = {}
        """slot -> the expiry last written for it"""
        self._pending: dict[_Slot, float] = {}
        """slot whose release failed -> the expiry after which it is gone anyway"""
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def num_held(self) -> int:
        return len(self._held)

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def hold(self, in_flight_key: str, lease_id: str, expires_at: float) -> None:
        self._held[(in_flight_key, lease_id)] = expires_at
        self._ensure_task()

    def abandon(self, in_flight_key: str, lease_id: str) -> None:
        """A reservation whose answer was lost: Redis may still run it once it answers again,
        so release its slot (if any) the way a failed release is retried."""
        self._pending[(in_flight_key, lease_id)] = self._clock() + self._ttl_s
        self._ensure_task()
        self._wake.set()

    async def release(self, in_flight_key: str, lease_id: str) -> None:
        """Free the slot now, or make sure it is freed as soon as the limiter answers again."""
        slot = (in_flight_key, lease_id)
        expires_at = self._held.pop(slot, self._clock() + self._ttl_s)
        try:
            await self._backend.release(in_flight_key, lease_id)
        except Exception as exc:
            log.warning("quota release failed for lease %s, retrying: %s", lease_id, exc)
            self._pending[slot] = expires_at
            self._ensure_task()
            self._wake.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _ensure_task(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name="quota-lease-keeper")

    async def _run(self) -> None:
        renew_every = self._ttl_s / 3
        next_renewal = asyncio.get_running_loop().time() + renew_every
        while self._held or self._pending:
            timeout = RETRY_S if self._pending else max(0.0, next_renewal - asyncio.get_running_loop().time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            await self._retry_releases()
            if asyncio.get_running_loop().time() >= next_renewal:
                next_renewal = asyncio.get_running_loop().time() + renew_every
                await self._renew()

    async def _retry_releases(self) -> None:
        now = self._clock()
        for slot, gone_at in list(self._pending.items()):
            if gone_at <= now:
                del self._pending[slot]
                continue
            try:
                await self._backend.release(*slot)
            except Exception:
                return  # still unreachable: the rest would fail the same way
            del self._pending[slot]

    async def _renew(self) -> None:
        expires_at = self._clock() + self._ttl_s
        for slot in list(self._held):
            try:
                await self._backend.renew(slot[0], slot[1], expires_at=expires_at, ttl_s=self._ttl_s)
            except Exception as exc:
                log.warning("quota lease renewal failed: %s", exc)
                return
            if slot in self._held:
                self._held[slot] = expires_at
