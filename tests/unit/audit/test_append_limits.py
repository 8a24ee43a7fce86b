"""A hung store costs a bounded wait and a refusal, never an unbounded queue or a late record."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from audit.sqlite_store import SqliteStore
from tests.audit_doubles import sample_event

pytestmark = pytest.mark.anyio


class HangingStore(SqliteStore):
    """A real SQLite store whose appends block while ``gate`` is clear."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()

    def append(self, rows: Any, checkpoint: Any) -> None:
        self.gate.wait(10)
        super().append(rows, checkpoint)


async def test_append_times_out_and_a_queued_refusal_is_never_written(tmp_path: Path) -> None:
    cfg = AuditConfig(append_timeout_s=0.3)
    store = HangingStore(tmp_path / "audit" / "audit.db")
    log = await AuditLog.open(cfg, tmp_path, store=store, heartbeat=False)
    store.gate.clear()
    in_flight = asyncio.create_task(log.append(sample_event(1, request_id="in-flight")))
    await asyncio.sleep(0.05)  # the writer takes it and hangs inside the store
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
    store = HangingStore(tmp_path / "audit" / "audit.db")
    log = await AuditLog.open(cfg, tmp_path, store=store, heartbeat=False)
    store.gate.clear()
    first = asyncio.create_task(log.append(sample_event(0)))
    await asyncio.sleep(0.05)
    waiting = [asyncio.create_task(log.append(sample_event(i))) for i in range(1, 4)]
    await asyncio.sleep(0.05)
    with pytest.raises(AuditUnavailableError, match="backlog"):
        await log.append(sample_event(9))
    store.gate.set()
    results = await asyncio.gather(first, *waiting)
    assert len(set(results)) == 4
    await log.close()
