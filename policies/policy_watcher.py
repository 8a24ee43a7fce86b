"""Keeps one replica's policy current in the background: notifications for speed, version
polling for certainty. (Correctness does not rest on it: a request that finds its replica behind
this host's version board, or past its lease, reloads through ``refresh_now`` before it is
decided; see ``policy_freshness``. The watcher keeps that rare and renews the lease.)

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
        self._num_asked = 0
        self._runner: asyncio.Task[None] | None = None

    async def refresh_now(self) -> None:
        """Return once a reload that began after this call has finished (successful or not: the
        caller checks what it needs). Reloads run one at a time; every ask made while one runs
        is answered by the next, so a burst of asks costs two reloads, not one each."""
        self._num_asked += 1
        await self._await_runner()

    async def reloaded(self) -> None:
        """Return once the reload under way, or a new one if none is, has finished: for a caller
        that only needs *some* reload to end (it checks afterwards whether that one was enough)."""
        if self._runner is None or self._runner.done():
            self._num_asked += 1
        await self._await_runner()

    async def _await_runner(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run_asked())
        # Shielded: a caller that stops waiting (its timeout, a disconnect) leaves the reload running.
        await asyncio.shield(self._runner)

    async def _run_asked(self) -> None:
        num_done = 0
        while num_done < self._num_asked:
            num_done = self._num_asked
            await asyncio.to_thread(self._safe_refresh)

    def _safe_refresh(self) -> None:
        try:
            self._refresh()
        except PolicyUnavailableError as exc:
            # Keep the last good policy: an unreadable store grants nothing new, and the lease
            # (``PolicyFreshness``) decides how long it may still be decided on.
            _refresh_failures.add(1)
            log.warning("policy refresh failed: %s", exc)
        except Exception:
            _refresh_failures.add(1)
            log.exception("policy refresh failed")

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._poll()))
        if self._redis is not None:
            self._tasks.append(asyncio.create_task(self._listen()))
        if self._store_changes is not None:
            self._tasks.append(asyncio.create_task(self._follow_store()))

    async def stop(self) -> None:
        if self._runner is not None:
            self._tasks.append(self._runner)
            self._runner = None
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
            await self.refresh_now()

    async def _listen(self) -> None:
        assert self._redis is not None
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        await self.refresh_now()
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
                    await self.refresh_now()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # store unreachable: polling still keeps us within the interval
                log.warning("policy store notifications lost, retrying: %s", exc)
            finally:
                # A cancel that lands in refresh_now leaves the generator suspended inside its
                # connection: close it here, not whenever it is collected.
                aclose = getattr(changes, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            await asyncio.sleep(self._interval_s)
