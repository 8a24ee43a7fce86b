"""The audit feed: workers' appends through the one writer, over a real Unix socket and SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import msgspec
import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.feed_server import AuditFeedServer
from audit.log import AuditLog
from audit.record import AuditContent
from common.audit_event import EventType
from tests.audit_doubles import sample_event as event
from tests.audit_doubles import until

# Short deadlines: a store that cannot commit is answered within about a second.
_CFG = AuditConfig(append_timeout_s=0.5, content_default="encrypt")


async def _owner(tmp_path: Path) -> tuple[AuditLog, AuditFeedServer]:
    log = await AuditLog.open(_CFG, tmp_path)
    return log, await AuditFeedServer.start(log, tmp_path, tmp_path / "feed.sock")


def test_two_workers_appends_form_one_chain_and_read_back(tmp_path: Path) -> None:
    async def go():
        owner, server = await _owner(tmp_path)
        workers = [await AuditLog.join(_CFG, tmp_path, tmp_path / "feed.sock") for _ in range(2)]
        seqs = await asyncio.gather(
            *(w.append(event(i), AuditContent(prompt=f"p{i}")) for i in range(40) for w in workers)
        )
        await workers[0].checkpoint()
        content = await workers[1].read_content(seqs[7])
        report = await workers[1].verify()
        for w in workers:
            await w.close()
        await server.close()
        records = await owner.tail(100)
        await owner.close()
        return seqs, content, report, records

    seqs, content, report, records = asyncio.run(go())
    assert len(set(seqs)) == 80 and max(seqs) - min(seqs) == 79
    assert content.prompt == "p3"  # seqs[7] is worker 1's append of event 3
    assert report.ok, report.problem
    inference = [r for r in records if r.event.event_type == EventType.INFERENCE]
    assert len(inference) == 80 and {r.seq for r in inference} == set(seqs)


def test_join_without_a_running_owner_fails(tmp_path: Path) -> None:
    async def go():
        owner, server = await _owner(tmp_path)
        await server.close()
        with pytest.raises(AuditUnavailableError):
            await AuditLog.join(_CFG, tmp_path, tmp_path / "feed.sock")
        await owner.close()

    asyncio.run(go())


def test_a_worker_whose_owner_is_gone_refuses_and_says_so(tmp_path: Path) -> None:
    async def go():
        owner, server = await _owner(tmp_path)
        worker = await AuditLog.join(_CFG, tmp_path, tmp_path / "feed.sock")
        await worker.append(event(1))
        assert worker.problem() == ""
        await server.close()
        await owner.close()
        await until(worker.problem, what="the worker seeing its connection end")
        problem = worker.problem()
        with pytest.raises(AuditUnavailableError):
            await worker.append(event(2))
        await worker.close()
        return problem

    assert "unreachable" in asyncio.run(go())


def test_an_owner_that_cannot_commit_in_time_answers_the_worker_503(tmp_path: Path) -> None:
    async def go():
        owner, server = await _owner(tmp_path)
        worker = await AuditLog.join(_CFG, tmp_path, tmp_path / "feed.sock")
        blocker = sqlite3.connect(tmp_path / "audit" / "audit.db", timeout=0)
        blocker.execute("BEGIN EXCLUSIVE")  # a real lock: the owner's store cannot commit
        with pytest.raises(AuditUnavailableError):
            await worker.append(event(2))
        blocker.rollback()
        blocker.close()
        seq = await worker.append(event(3))
        records = await worker.tail(5)
        report = await worker.verify()
        await worker.close()
        await server.close()
        await owner.close()
        return seq, records, report

    # Answered 503 within the owner's deadlines; the record may still land once the lock goes
    # (a refused request with a record is allowed, an answered one without never).
    seq, records, report = asyncio.run(go())
    assert records[-1].seq == seq and records[-1].event.request_id == "req-3"
    assert report.ok, report.problem


def test_archive_from_a_worker_runs_in_the_owner(tmp_path: Path) -> None:
    cfg = msgspec.structs.replace(_CFG, retention_online_days=1)

    async def go():
        owner = await AuditLog.open(cfg, tmp_path, clock=lambda: 1_796_000_000.0)
        server = await AuditFeedServer.start(owner, tmp_path, tmp_path / "feed.sock")
        worker = await AuditLog.join(cfg, tmp_path, tmp_path / "feed.sock")
        await worker.append(event(1))
        nothing_old = await worker.archive(tmp_path)
        await worker.close()
        await server.close()
        await owner.close()
        return nothing_old

    assert asyncio.run(go()) is None  # asked and answered by the owner: nothing is a day old yet
