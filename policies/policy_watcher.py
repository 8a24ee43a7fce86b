"""Keeps one replica's policy current: notifications for speed, version polling for certainty.

casbin's Redis watcher only publishes, so a replica that misses a message never catches up. Here
the store's version is the truth: every ``interval_s`` the replica compares it with its own and
reloads when they differ, and an announcement on the Redis channel only makes that happen sooner.
A missed message therefore costs at most one poll interval (<= 1 s by config). The notifications
are Redis pub/sub (when configured) and the store's own (PostgreSQL LISTEN/NOTIFY, sent in the
change's transaction, so they arrive exactly when it commits). Reloads run off
the event loop, one at a time: a policy store that hangs (PostgreSQL frozen) stalls only them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from opentelemetry import metrics

from policies.errors import PolicyUnavailableError

__all__ = ["PolicyWatcher"]

log = logging.getLogger("strongroom.policies")
_refresh_failures = metrics.get_meter("strongroom.policies").create_counter(
    "strongroom_policy_refresh_failures", description="Policy reloads that failed; the last good policy stays"
)


class PolicyWatcher:
    def __init__(
        self,
        refresh: Callable[[], bool],
        *,
        interval_s: float,
        redis: Any | None = None,
        channel: str = "",
        store_changes: Callable[[], AsyncIterator[None] | None] | None = None,
    ) -> None:
        """``store_changes`` opens the store's own change feed (None: it has none)."""
        self._refresh = refresh
        self._store_changes = store_changes
        self._interval_s = interval_s
        self._redis = redis
        self._channel = channel
        self._tasks: list[asyncio.Task[None]] = []
        self._is_refreshing = False
        self._is_refresh_wanted = False

    async def _refresh_off_loop(self) -> None:
        if self._is_refreshing:  # it may have read before this news: run once more after it
            self._is_refresh_wanted = True
            return
        self._is_refreshing = True
        try:
            while True:
                self._is_refresh_wanted = False
                await asyncio.to_thread(self._safe_refresh)
                if not self._is_refresh_wanted:
                    return
        finally:
            self._is_refreshing = False

    def _safe_refresh(self) -> None:
        try:
            self._refresh()
        except PolicyUnavailableError as exc:
            # Keep deciding on the last good policy: an unreadable store grants nothing new.
            _refresh_failures.add(1)
            log.warning("policy refresh failed: %s", exc)

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._poll()))
        if self._redis is not None:
            self._tasks.append(asyncio.create_task(self._listen()))
        if self._store_changes is not None:
            self._tasks.append(asyncio.create_task(self._follow_store()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def announce(self, version: int) -> None:
        """Tell the other replicas a new version exists. Best effort: polling covers a failure."""
        if self._redis is None:
            return
        try:
            await self._redis.publish(self._channel, str(version))
        except Exception as exc:  # any Redis failure: the change is committed; polls will find it
            log.warning("policy version %d not announced: %s", version, exc)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self._refresh_off_loop()

    async def _listen(self) -> None:
        assert self._redis is not None
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        await self._refresh_off_loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down: polling still keeps us within the interval
                log.warning("policy channel lost, retrying: %s", exc)
                await asyncio.sleep(self._interval_s)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def _follow_store(self) -> None:
        assert self._store_changes is not None
        while True:
            changes = self._store_changes()
            if changes is None:
                return
            try:
                async for _ in changes:
                    await self._refresh_off_loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # store unreachable: polling still keeps us within the interval
                log.warning("policy store notifications lost, retrying: %s", exc)
            await asyncio.sleep(self._interval_s)
