"""A hung store costs a bounded wait and a refusal, never an unbounded queue or a late record."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from tests.audit_doubles import GatedStore, sample_event

pytestmark = pytest.mark.anyio


async def test_append_times_out_and_a_queued_refusal_is_never_written(tmp_path: Path) -> None:
    cfg = AuditConfig(append_timeout_s=0.3)
    store = GatedStore(tmp_path / "audit" / "audit.db")
    log = await AuditLog.open(cfg, tmp_path, store=store, heartbeat=False)
    store.gate.clear()
    num_before = len(store.threads)
    in_flight = asyncio.create_task(log.append(sample_event(1, request_id="in-flight")))
    await store.writer_inside(num_before)  # the writer takes it and hangs inside the store
    started = time.monotonic()
    with pytest.raises(AuditUnavailableError, match="timed out"):
        await log.append(sample_event(2, request_id="queued"))
    assert time.monotonic() - started < 2
    store.gate.set()
    await asyncio.gather(in_flight, return_exceptions=True)
    ok = await log.append(sample_event(3, request_id="after"))
    ids = [r.event.request_id for r in await log.tail(10)]
    assert "queued" not in ids and "after" in ids
    assert (await log.tail(1))[0].seq == ok
    assert (await log.verify()).ok
    await log.close()


async def test_a_full_backlog_is_refused_at_once(tmp_path: Path) -> None:
    cfg = AuditConfig(max_pending=3, append_timeout_s=5)
    store = GatedStore(tmp_path / "audit" / "audit.db")
    log = await AuditLog.open(cfg, tmp_path, store=store, heartbeat=False)
    store.gate.clear()
    num_before = len(store.threads)
    first = asyncio.create_task(log.append(sample_event(0)))
    await store.writer_inside(num_before)
    waiting = [asyncio.create_task(log.append(sample_event(i))) for i in range(1, 4)]
    await asyncio.sleep(0.05)  # queued: the backlog is theirs
    with pytest.raises(AuditUnavailableError, match="backlog"):
        await log.append(sample_event(9))
    store.gate.set()
    results = await asyncio.gather(first, *waiting)
    assert len(set(results)) == 4
    await log.close()
