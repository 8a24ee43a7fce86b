"""The writer thread: what a batch shares, what it does not, and how it reports itself."""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from pathlib import Path

import pytest

from audit.chain_writer import Entry
from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.group_commit import BatchTiming
from audit.log import AuditLog
from audit.query import AuditQuery
from audit.record import encode_event
from audit.sqlite_store import SqliteStore
from tests.audit_doubles import FakeClock, GatedStore, sample_event, until

pytestmark = pytest.mark.anyio


async def test_a_bad_event_is_refused_alone_and_its_batch_commits(open_log) -> None:
    log = await open_log(heartbeat=False)
    bad = sample_event(99, request_id="bad", latency_ms=math.nan)
    results = await asyncio.gather(
        *(log.append(sample_event(i)) for i in range(5)), log.append(bad), return_exceptions=True
    )
    assert isinstance(results[-1], AuditUnavailableError)
    assert sorted(results[:-1]) == [2, 3, 4, 5, 6]  # type: ignore[type-var]
    assert (await log.search(AuditQuery(event_type="audit_outage"))).records == []
    assert (await log.verify()).ok
    await log.close()


async def test_a_cancelled_append_is_still_recorded(tmp_path: Path) -> None:
    """The caller going away (a client disconnect) must not erase the record of what it did."""
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(), tmp_path, store=store, heartbeat=False)
    store.gate.clear()
    num_before = len(store.threads)
    first = asyncio.create_task(log.append(sample_event(1, request_id="first")))
    await store.writer_inside(num_before)
    queued = asyncio.create_task(log.append(sample_event(2, request_id="cancelled")))
    await asyncio.sleep(0.01)
    queued.cancel()
    store.gate.set()
    await first
    last = await log.append(sample_event(3, request_id="after"))
    assert [r.event.request_id for r in await log.tail(3)] == ["first", "cancelled", "after"]
    assert (await log.tail(1))[0].seq == last
    await log.close()


async def test_commits_run_on_the_writer_thread_and_report_their_timing(tmp_path: Path) -> None:
    timings: list[BatchTiming] = []
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(), tmp_path, store=store, heartbeat=False, on_batch=timings.append)
    seqs = await asyncio.gather(*(log.append(sample_event(i)) for i in range(40)))
    await log.close()
    assert set(store.threads) == {"audit-writer"}
    with_records = [t for t in timings if t.num_records]
    assert sum(t.num_records for t in with_records) == 42  # service_start, 40 appends, service_stop
    assert len(with_records) < 42  # group commit: at least one batch held several
    assert [t.first_seq for t in with_records][:2] == [1, 2]
    for before, after in itertools.pairwise(with_records):
        assert after.first_seq == before.first_seq + before.num_records
    assert all(t.taken_at <= t.committed_at <= t.resolved_at for t in timings)
    assert sorted(seqs) == list(range(2, 42))


async def test_a_failing_store_is_not_retried_in_a_tight_loop(tmp_path: Path) -> None:
    clock = FakeClock()
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(), tmp_path, store=store, clock=clock)
    store.is_broken = True
    clock.advance(120)  # a heartbeat checkpoint is due now and stays due while the store fails
    num_before = len(store.threads)
    wake = asyncio.create_task(log.append(sample_event(1)))
    with pytest.raises(AuditUnavailableError):
        await wake
    await asyncio.sleep(0.3)
    assert len(store.threads) - num_before < 20  # about one try per 50 ms, not thousands
    store.is_broken = False
    assert await log.append(sample_event(2)) > 0
    await log.close()


async def test_checkpoint_after_close_is_refused(open_log) -> None:
    log = await open_log()
    await log.close()
    with pytest.raises(AuditUnavailableError, match="closed"):
        await asyncio.wait_for(log.checkpoint(), 2)


class IdleCountingStore(SqliteStore):
    """Counts the writer's idle calls (and their thread); ``idle_fails`` makes them raise."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, preallocate_wal_bytes=0)
        self.idle_threads: list[str] = []
        self.idle_fails = False

    def idle(self) -> None:
        self.idle_threads.append(threading.current_thread().name)
        if self.idle_fails:
            raise RuntimeError("housekeeping broke")
        super().idle()


async def test_the_writer_does_housekeeping_only_when_no_append_waits(tmp_path: Path) -> None:
    """Store housekeeping (the SQLite WAL rewind) runs on the writer thread when its queue is empty;
    a failing one does not stop the writer."""
    store = IdleCountingStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(), tmp_path, store=store, heartbeat=False)
    await log.append(sample_event(1))
    await until(lambda: store.idle_threads, what="the writer idling")
    assert set(store.idle_threads) == {"audit-writer"}
    store.idle_fails = True
    num_idle = len(store.idle_threads)
    assert await log.append(sample_event(2)) > 0
    await until(lambda: len(store.idle_threads) > num_idle, what="the writer idling again")
    assert await log.append(sample_event(3)) > 0
    assert (await log.verify()).ok
    await log.close()


async def test_maintenance_runs_on_its_own_thread_after_a_checkpoint(tmp_path: Path) -> None:
    """Not on the reader thread (a WAL checkpoint would hold up the reads queued behind it)."""
    threads: list[str] = []

    class RecordingStore(SqliteStore):
        def maintain(self) -> None:
            threads.append(threading.current_thread().name)
            super().maintain()

    log = await AuditLog.open(
        AuditConfig(), tmp_path, store=RecordingStore(tmp_path / "audit.db"), heartbeat=False
    )
    await log.append(sample_event(1))
    await log.checkpoint()
    await log.close()
    assert threads and all(name.startswith("audit-maintenance") for name in threads)


def _entries(ids: range) -> list[Entry]:
    """Entries as a worker encodes them for the feed (``AuditFeedServer`` hands them on)."""
    return [Entry(encode_event(sample_event(i), 1_796_000_000_000_000 + i), None, True) for i in ids]


async def _writer_held(log: AuditLog, store: GatedStore) -> asyncio.Task[int]:
    """An append the writer has taken and is committing while ``store.gate`` stays clear."""
    store.gate.clear()
    num_before = len(store.threads)
    held = asyncio.create_task(log.append(sample_event(0, request_id="held")))
    await store.writer_inside(num_before)
    return held


async def test_a_frames_entries_are_queued_together_without_a_task_each(tmp_path: Path) -> None:
    """The owner's side of a worker's frame: one group commit, in order, and no task per record."""
    timings: list[BatchTiming] = []
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(), tmp_path, store=store, heartbeat=False, on_batch=timings.append)
    held = await _writer_held(log, store)
    tasks_before = asyncio.all_tasks()
    frame = asyncio.create_task(log.append_entries(_entries(range(1, 6))))
    await asyncio.sleep(0.01)
    assert asyncio.all_tasks() - tasks_before == {frame}
    store.gate.set()
    first = await held
    seqs = await frame
    assert seqs == list(range(first + 1, first + 6))
    assert [t.num_records for t in timings if t.first_seq == first + 1] == [5]
    assert [r.event.request_id for r in await log.tail(5)] == [f"req-{i}" for i in range(1, 6)]
    await log.close()


async def test_a_frame_past_the_backlog_refuses_only_its_entries_over_the_limit(tmp_path: Path) -> None:
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(max_pending=2), tmp_path, store=store, heartbeat=False)
    held = await _writer_held(log, store)
    frame = asyncio.create_task(log.append_entries(_entries(range(1, 5))))
    await asyncio.sleep(0.01)
    store.gate.set()
    await held
    results = await frame
    assert isinstance(results[0], int) and results[1] == results[0] + 1
    assert all(isinstance(r, AuditUnavailableError) and "backlog is full" in str(r) for r in results[2:])
    written = {r.event.request_id for r in await log.tail(10)}
    assert {"req-1", "req-2"} <= written and not {"req-3", "req-4"} & written
    await log.close()


async def test_a_frame_still_queued_at_its_deadline_is_refused_and_never_written(tmp_path: Path) -> None:
    store = GatedStore(tmp_path / "audit.db")
    log = await AuditLog.open(AuditConfig(append_timeout_s=0.1), tmp_path, store=store, heartbeat=False)
    held = await _writer_held(log, store)
    results = await log.append_entries(_entries(range(1, 4)))
    assert all(isinstance(r, AuditUnavailableError) and "timed out" in str(r) for r in results)
    store.gate.set()
    await asyncio.gather(held, return_exceptions=True)  # taken: its answer depends on timing, not asked here
    assert await log.append(sample_event(9)) > 0
    written = {r.event.request_id for r in await log.tail(10)}
    assert "req-9" in written and not {"req-1", "req-2", "req-3"} & written
    await log.close()


async def test_a_closed_log_refuses_a_frame(open_log) -> None:
    log = await open_log(heartbeat=False)
    await log.close()
    results = await log.append_entries(_entries(range(1, 3)))
    assert all(isinstance(r, AuditUnavailableError) and "closed" in str(r) for r in results)
