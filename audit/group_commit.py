"""Group commit on one dedicated writer thread.

    event loop                          writer thread                           event loop
    append(entry) --put--> SimpleQueue --> take what queued (<= max_batch)
                                           ChainWriter.commit: seal, INSERT,
                                           COMMIT (one fsync for the batch)
                                           --call_soon_threadsafe(batch)-->  futures resolved

One batch at a time: whatever queued while a commit ran goes into the next one. The writer
blocks in the queue itself, so starting a commit costs no event-loop turn, and a batch's
results come back in one callback. Before it blocks on an empty queue it runs the store's
housekeeping (``idle``: SQLite rewinds its WAL there), so that no waiting batch pays for it.
Entries are encoded by the caller (``encode_event``) before they are queued; the writer only
chains, hashes and stores.

What the client is told is what gets written. An append still queued at its deadline
(``append_timeout_s``) is dropped, never written, and counted by the next outage record; one
the writer already took waits for that commit's outcome (so a success is never answered 503),
and only a commit that outlasts a second deadline is abandoned: its caller gets 503 and, should
the commit land after all, the outage record names those records. ``taken``, ``dropped``,
``abandoned`` and ``settled`` only change under one lock. Appends refused because the backlog
is full are counted too. A cancelled caller does not drop its record (it may describe a
response already sent). Only the writer thread calls the ``ChainWriter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from audit.chain_writer import ChainWriter, Entry
from audit.config import AuditConfig
from audit.errors import AuditUnavailableError

_log = logging.getLogger(__name__)


class BatchTiming(NamedTuple):
    """``time.perf_counter`` stamps of one group commit, for metrics and the benchmark's profile."""

    first_seq: int
    num_records: int
    taken_at: float
    """The writer drew the batch from the queue."""
    committed_at: float
    """The store's transaction returned: the batch is durable."""
    resolved_at: float
    """Back on the event loop, just before the appends' futures are resolved."""


class _Pending:
    __slots__ = ("abandoned", "dropped", "entry", "future", "settled", "taken", "timer")

    def __init__(self, entry: Entry | None, future: asyncio.Future[int]) -> None:
        self.entry = entry
        """None for a barrier (``checkpoint``)."""
        self.future = future
        self.taken = False
        """The writer put it in a batch: its commit's outcome decides the answer."""
        self.dropped = False
        """Timed out while queued: never written."""
        self.abandoned = False
        """Its commit outlasted the second deadline: the caller was answered 503 meanwhile."""
        self.settled = False
        """The writer knows its commit's outcome."""
        self.timer: asyncio.TimerHandle | None = None


_FAILURE_BACKOFF_S = 0.05
"""After a failed commit, a due checkpoint alone retries no sooner than this (appends still wake it)."""

_FAILURE_RETRY_S = 0.5
"""While failing, the writer tries again (the outage record first) at least this often."""

_WAKE = object()
"""Queued by ``close`` so a writer blocked in the queue looks at the closing flag."""


class GroupCommit:
    def __init__(
        self,
        cfg: AuditConfig,
        writer: ChainWriter,
        *,
        heartbeat: bool,
        final_on_close: bool,
        on_checkpoint: Callable[[], None],
        on_failure: Callable[[list[Entry], bool], None],
        on_batch: Callable[[BatchTiming], None] | None = None,
    ) -> None:
        """``on_checkpoint`` runs on the writer thread after a checkpoint committed (keep it short);
        ``on_failure(entries, is_new_outage)`` and ``on_batch`` run on the event loop."""
        self._cfg = cfg
        self._writer = writer
        self._heartbeat = heartbeat
        self._final_on_close = final_on_close
        self._on_checkpoint = on_checkpoint
        self._on_failure = on_failure
        self._on_batch = on_batch
        self._loop = asyncio.get_running_loop()
        self._queue: queue.SimpleQueue[_Pending | object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._force_checkpoint = False
        self._is_failing = False
        self._is_closing = False
        self._num_unqueued = [0, 0]
        """Appends refused before they were queued (backlog full): [answered 503, streams cut]."""
        self._num_dropped = 0
        """Queued appends that timed out before the writer took them: still in the queue until it
        skips them, but no longer part of the backlog a new append is refused for."""
        self._stopped: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    @property
    def is_failing(self) -> bool:
        """The last commit failed (and none succeeded since)."""
        return self._is_failing or self._stopped.done()

    async def append(self, entry: Entry) -> int:
        """Queue ``entry``; its sequence number once durable, or ``AuditUnavailableError``."""
        if self._stopped.done():
            raise AuditUnavailableError("audit writer stopped")
        pending = self._enqueue(entry)
        if pending is None:
            raise AuditUnavailableError("audit log backlog is full")
        pending.timer = self._loop.call_later(self._cfg.append_timeout_s, self._expire, pending, False)
        try:
            return await pending.future
        finally:
            pending.timer.cancel()

    async def append_many(self, entries: list[Entry]) -> list[int | AuditUnavailableError]:
        """``append`` for each entry, all queued in one step, so that a feed frame's records go
        into one group commit without a task per record. Per entry, its sequence number once
        durable or the error that ``append`` would have raised."""
        if self._stopped.done():
            return [AuditUnavailableError("audit writer stopped")] * len(entries)
        full = AuditUnavailableError("audit log backlog is full")
        slots = [self._enqueue(entry) for entry in entries]
        queued = [p for p in slots if p is not None]
        # One timer for the frame: its records were queued together, so they share a deadline.
        timer = self._loop.call_later(self._cfg.append_timeout_s, self._expire_all, queued)
        try:
            outcomes = iter(await asyncio.gather(*(p.future for p in queued), return_exceptions=True))
        finally:
            timer.cancel()
            for pending in queued:
                if pending.timer is not None:  # the second deadline of one taken when the first passed
                    pending.timer.cancel()
        return [full if p is None else _outcome(next(outcomes)) for p in slots]

    def _enqueue(self, entry: Entry) -> _Pending | None:
        """``entry`` queued for the writer, or None (counted) when the backlog is full: the writer
        is not keeping up (a hung store), so refuse rather than queue without bound."""
        if self._queue.qsize() - self._num_dropped >= self._cfg.max_pending:
            with self._lock:
                self._num_unqueued[entry.served] += 1
            return None
        pending = _Pending(entry, self._loop.create_future())
        self._queue.put(pending)
        return pending

    def _expire_all(self, pendings: list[_Pending]) -> None:
        for pending in pendings:
            self._expire(pending, False)

    async def barrier(self) -> int:
        """Commit a checkpoint covering everything queued so far; returns the head seq."""
        if self._is_closing or self._stopped.done():
            raise AuditUnavailableError("audit log is closed")
        pending = _Pending(None, self._loop.create_future())
        self._queue.put(pending)
        return await pending.future

    async def close(self) -> None:
        """Commit what is queued, then the last checkpoint (``final`` when recording the lifecycle)."""
        self._is_closing = True
        self._queue.put(_WAKE)
        await self._stopped
        self._thread.join()
        while not self._queue.empty():  # a barrier queued after close started: nobody will take it
            item = self._queue.get_nowait()
            if isinstance(item, _Pending) and not item.future.done():
                item.future.set_exception(AuditUnavailableError("audit log is closed"))

    def _expire(self, pending: _Pending, is_second: bool) -> None:
        with self._lock:
            if pending.settled:
                return  # the outcome is on its way to the event loop
            if not pending.taken:
                pending.dropped = True  # the writer skips it: a refused request never gets a record
                self._num_dropped += 1
            elif not is_second:
                # In a commit now: answering 503 could contradict the record it is about to write.
                pending.timer = self._loop.call_later(self._cfg.append_timeout_s, self._expire, pending, True)
                return
            else:
                pending.abandoned = True
        if not pending.future.done():
            pending.future.set_exception(AuditUnavailableError("audit append timed out"))

    # --- writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._run_once():
                pass
        except BaseException:  # a bug, not a store failure: waiting appends time out (fail closed)
            _log.exception("audit writer thread died")
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone already
                self._loop.call_soon_threadsafe(_set_done, self._stopped)

    def _run_once(self) -> bool:
        """Take and commit one batch; False once closed."""
        items = self._take()
        with self._lock:
            real = [p for p in items if p.entry is not None and not p.dropped]
            for p in real:
                p.taken = True
            refused = [p.entry for p in items if p.entry is not None and p.dropped]
            self._num_dropped -= len(refused)
            num_unqueued, self._num_unqueued = self._num_unqueued, [0, 0]
        num_cut = sum(e.served for e in refused) + num_unqueued[1]
        if refused or num_unqueued[0] or num_cut:
            self._writer.note_refused(
                len(refused) - num_cut + sum(num_unqueued),
                "append timed out or backlog full",
                num_cut=num_cut,
            )
        barriers = [p for p in items if p.entry is None]
        closing = self._is_closing and self._queue.empty()
        unsealed = bool(real) or self._writer.num_unsealed > 0 or self._writer.has_outage
        due = (
            self._force_checkpoint
            or bool(barriers)
            or (closing and unsealed)
            or self._writer.is_checkpoint_due(len(real), heartbeat=self._heartbeat)
        )
        if real or due or self._writer.has_outage:
            self._commit(real, barriers, checkpoint=due, final=closing and self._final_on_close)
        return not closing

    def _take(self) -> list[_Pending]:
        """Block until something is queued (or a checkpoint is due), then drain up to max_batch."""
        timeout = (
            self._writer.seconds_to_checkpoint() if self._heartbeat or self._writer.num_unsealed else None
        )
        if self._is_failing:
            # Retry on our own: a replica that reports itself not ready gets no traffic to do it.
            timeout = (
                _FAILURE_RETRY_S
                if timeout is None
                else min(max(timeout, _FAILURE_BACKOFF_S), _FAILURE_RETRY_S)
            )
        if self._queue.empty() and not self._is_failing:
            self._idle()
        items: list[_Pending] = []
        try:
            item = self._queue.get(timeout=timeout)
            while True:
                if isinstance(item, _Pending):
                    items.append(item)
                if len(items) >= self._cfg.max_batch:
                    break
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return items

    def _idle(self) -> None:
        """Housekeeping that would otherwise stall a waiting batch, done before blocking on the queue."""
        try:
            self._writer.idle()
        except Exception as exc:  # housekeeping only: never let it take the writer down
            _log.warning("audit writer housekeeping failed: %s", type(exc).__name__)

    def _commit(
        self, real: list[_Pending], barriers: list[_Pending], *, checkpoint: bool, final: bool
    ) -> None:
        taken_at = time.perf_counter()
        entries = [p.entry for p in real if p.entry is not None]
        try:
            seqs = self._writer.commit(entries, checkpoint=checkpoint, final=final)
        except Exception as exc:
            _log.error("audit append failed (%d records refused): %s", len(real), type(exc).__name__)
            with self._lock:
                for p in real:
                    p.settled = True
            num_cut = sum(e.served for e in entries)
            is_new_outage = self._writer.note_failure(len(real) - num_cut, exc, num_cut=num_cut)
            self._is_failing = True
            self._force_checkpoint = self._force_checkpoint or bool(barriers)
            error = exc if isinstance(exc, AuditUnavailableError) else AuditUnavailableError(str(exc))
            self._loop.call_soon_threadsafe(self._fail, [*real, *barriers], error, entries, is_new_outage)
            return
        committed_at = time.perf_counter()
        with self._lock:
            for p in real:
                p.settled = True
            late = [(p, seq) for p, seq in zip(real, seqs, strict=True) if p.abandoned]
        if late:  # answered 503 while this commit hung: the next outage record names them
            num_cut = sum(p.entry is not None and p.entry.served for p, _ in late)
            self._writer.note_refused(
                len(late) - num_cut, "commit outlasted the append timeout", num_cut=num_cut
            )
            self._writer.note_landed([seq for _, seq in late])
        if checkpoint:
            self._on_checkpoint()
        self._force_checkpoint = self._is_failing = False
        timing = (seqs[0] if seqs else 0, len(seqs), taken_at, committed_at)
        self._loop.call_soon_threadsafe(self._resolve, real, seqs, barriers, self._writer.head.seq, timing)

    # --- back on the event loop ----------------------------------------------------------------

    def _resolve(
        self,
        real: list[_Pending],
        seqs: list[int],
        barriers: list[_Pending],
        head_seq: int,
        timing: tuple[int, int, float, float],
    ) -> None:
        resolved_at = time.perf_counter()
        for pending, seq in zip(real, seqs, strict=True):
            if not pending.future.done():  # timed out after it was taken, or its caller cancelled
                pending.future.set_result(seq)
        for pending in barriers:
            if not pending.future.done():
                pending.future.set_result(head_seq)
        if self._on_batch is not None:
            self._on_batch(BatchTiming(*timing, resolved_at))

    def _fail(
        self, pendings: list[_Pending], error: Exception, entries: list[Entry], is_new_outage: bool
    ) -> None:
        for pending in pendings:
            if not pending.future.done():
                pending.future.set_exception(error)
        self._on_failure(entries, is_new_outage)


def _outcome(result: int | BaseException) -> int | AuditUnavailableError:
    if isinstance(result, BaseException) and not isinstance(result, AuditUnavailableError):
        raise result  # cancelled: as ``append`` would
    return result


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
