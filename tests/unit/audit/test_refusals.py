"""What the client is told is what the log says (issue 17, finding 6).

An append still queued at its deadline is never written and the next outage record counts it;
one already in a commit gets that commit's outcome rather than a 503 that its own record would
contradict; a commit that outlasts a second deadline is answered 503 and, when it lands after
all, named by the outage record. Stream ends refused after the content went out are counted as
cut streams, not as requests answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from audit.query import AuditQuery
from tests.audit_doubles import GatedStore, sample_event

pytestmark = pytest.mark.anyio


async def _open(tmp_path: Path, **cfg: Any) -> tuple[AuditLog, GatedStore]:
    store = GatedStore(tmp_path / "audit.db", preallocate_wal_bytes=0)
    log = await AuditLog.open(AuditConfig(**cfg), tmp_path, store=store, heartbeat=False)
    return log, store


async def _outage(log: AuditLog) -> str:
    records = (await log.search(AuditQuery(event_type="audit_outage"))).records
    assert len(records) == 1
    return f"{records[0].event.reason} | {records[0].event.detail}"


async def test_a_taken_append_gets_its_commits_outcome_and_queued_ones_are_refused_and_counted(
    tmp_path: Path,
) -> None:
    log, store = await _open(tmp_path, append_timeout_s=0.5, max_pending=3)
    store.gate.clear()
    num_before = len(store.threads)  # opening the log appended already
    taken = asyncio.create_task(log.append(sample_event(1, request_id="taken")))
    await store.writer_inside(num_before)  # it holds "taken" inside the (hung) store
    queued = [asyncio.create_task(log.append(sample_event(i, request_id=f"queued-{i}"))) for i in range(3)]
    await asyncio.sleep(0.01)
    with pytest.raises(AuditUnavailableError, match="backlog"):
        await log.append(sample_event(9, request_id="over-backlog"))
    for task in queued:  # their deadline comes after the taken append's first one, before its second
        with pytest.raises(AuditUnavailableError, match="timed out"):
            await task
    store.gate.set()
    seq = await taken  # the old code answered 503 here and then committed it as a success
    assert (await log.get(seq)).event.request_id == "taken"
    await log.append(sample_event(5, request_id="after"))
    assert "4 appends refused (answered 503)" in await _outage(log)
    ids = [r.event.request_id for r in (await log.search(AuditQuery())).records]
    assert not any(i.startswith(("queued-", "over-")) for i in ids)
    assert (await log.verify()).ok
    await log.close()


async def test_appends_that_timed_out_in_the_queue_leave_the_backlog(tmp_path: Path) -> None:
    # Three queued appends time out while the store hangs: the writer has not skipped them yet,
    # but they are no backlog any more, so the next append is queued (and waits its own time)
    # instead of being refused as if the backlog were full.
    log, store = await _open(tmp_path, append_timeout_s=0.3, max_pending=3)
    store.gate.clear()
    num_before = len(store.threads)
    taken = asyncio.create_task(log.append(sample_event(1, request_id="taken")))
    await store.writer_inside(num_before)
    queued = [asyncio.create_task(log.append(sample_event(i, request_id=f"queued-{i}"))) for i in range(3)]
    for task in queued:
        with pytest.raises(AuditUnavailableError, match="timed out"):
            await task
    with pytest.raises(AuditUnavailableError, match="timed out"):  # queued, not "backlog is full"
        await log.append(sample_event(7, request_id="next"))
    store.gate.set()
    with contextlib.suppress(AuditUnavailableError):  # past its second deadline by now, or not
        await taken
    await log.append(sample_event(8, request_id="after"))
    ids = [r.event.request_id for r in (await log.search(AuditQuery())).records]
    assert "after" in ids and "next" not in ids and not any(i.startswith("queued-") for i in ids)
    await log.close()


async def test_a_commit_outlasting_both_deadlines_is_refused_and_named_when_it_lands(tmp_path: Path) -> None:
    log, store = await _open(tmp_path, append_timeout_s=0.1)
    store.gate.clear()
    late = asyncio.create_task(log.append(sample_event(1, request_id="late")))
    with pytest.raises(AuditUnavailableError, match="timed out"):
        await late
    store.gate.set()
    await log.append(sample_event(2, request_id="after"))
    outage = await _outage(log)
    assert "1 appends refused (answered 503)" in outage
    assert "records 2-2 were stored although their appends were reported refused" in outage
    assert (await log.get(2)).event.request_id == "late"
    await log.close()


async def test_a_lost_stream_end_counts_as_a_cut_stream_not_a_refused_request(tmp_path: Path) -> None:
    log, store = await _open(tmp_path)
    store.is_broken = True
    with pytest.raises(AuditUnavailableError):
        await log.append(sample_event(1, request_id="stream-end"), served=True)
    with pytest.raises(AuditUnavailableError):
        await log.append(sample_event(2, request_id="refused"))
    store.is_broken = False
    await log.append(sample_event(3, request_id="after"))
    outage = await _outage(log)
    assert "1 appends refused (answered 503); 1 streams ended with an error event instead of [DONE]" in outage
    await log.close()
