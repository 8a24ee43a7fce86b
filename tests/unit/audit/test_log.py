from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from audit.config import AuditConfig, ContentRule
from audit.errors import AuditConfigError, AuditIntegrityError, AuditNotFoundError, AuditUnavailableError
from audit.query import AuditQuery
from audit.record import AuditContent
from common.audit_event import Decision, EventType
from tests.audit_doubles import sample_event as event


def test_append_returns_consecutive_seqs_and_tail_reads_them(open_log) -> None:
    async def go():
        log = await open_log()
        seqs = await asyncio.gather(*(log.append(event(i)) for i in range(50)))
        tail = await log.tail(3)
        await log.close()
        return seqs, tail

    seqs, tail = asyncio.run(go())
    assert seqs == list(range(2, 52))  # seq 1 is service_start
    assert [r.seq for r in tail] == [49, 50, 51]
    assert tail[-1].event.request_id == "req-49"
    assert tail[-1].time == "2026-11-30T00:53:20.000000Z"
    assert tail[1].hash == tail[2].prev_hash


def test_records_survive_reopen_and_chain_continues(open_log, tmp_path: Path) -> None:
    async def go():
        log = await open_log()
        await log.append(event(1))
        await log.close()
        log = await open_log()
        seq = await log.append(event(2))
        report = await log.verify()
        await log.close()
        return seq, report

    seq, report = asyncio.run(go())
    assert seq == 5  # start, 1, stop, start, 2
    assert report.ok, report.problem
    assert report.num_records == 5 and report.sealed_seq == 3  # the last two await the next checkpoint


def test_checkpoint_after_n_records_and_after_interval(open_log, clock) -> None:
    cfg = AuditConfig(checkpoint_every=10, checkpoint_interval_s=60)

    async def go():
        log = await open_log(cfg, heartbeat=False)
        for i in range(25):
            await log.append(event(i))
        after_count = log.store.checkpoints(0, 100)
        clock.advance(61)
        await log.append(event(99))
        after_time = log.store.checkpoints(0, 100)
        await log.close()
        return after_count, after_time

    after_count, after_time = asyncio.run(go())
    assert [cp.seq for cp in after_count] == [10, 20]
    assert [cp.seq for cp in after_time] == [10, 20, 27]
    assert after_time[1].prev == after_time[0].digest()


def test_closed_log_refuses_appends(open_log) -> None:
    async def go():
        log = await open_log()
        await log.close()
        with pytest.raises(AuditUnavailableError):
            await log.append(event(1))

    asyncio.run(go())


def test_store_failure_fails_closed_then_records_the_outage(open_log, tmp_path: Path) -> None:
    async def go():
        log = await open_log()
        await log.append(event(1))
        blocker = sqlite3.connect(tmp_path / "audit" / "audit.db")
        blocker.execute("BEGIN EXCLUSIVE")  # a real lock: the store cannot commit
        with pytest.raises(AuditUnavailableError):
            await asyncio.wait_for(log.append(event(2)), 30)
        blocker.rollback()
        blocker.close()
        seq = await log.append(event(3))
        records = await log.tail(3)
        await log.close()
        return seq, records

    seq, records = asyncio.run(go())
    outage, last = records[-2], records[-1]
    assert outage.event.event_type == EventType.AUDIT_OUTAGE
    assert "1 appends refused" in outage.event.reason
    assert last.event.request_id == "req-3" and last.seq == seq == outage.seq + 1
    assert all(r.event.request_id != "req-2" for r in records)


def test_wrong_signing_key_is_refused(open_log, tmp_path: Path) -> None:
    async def go():
        log = await open_log()
        await log.close()
        (tmp_path / "keys" / "audit-signing-key.pem").unlink()
        with pytest.raises(AuditConfigError):
            await open_log()

    asyncio.run(go())


def test_signing_key_created_private(open_log, tmp_path: Path) -> None:
    async def go():
        await (await open_log()).close()

    asyncio.run(go())
    assert (tmp_path / "keys" / "audit-signing-key.pem").stat().st_mode & 0o777 == 0o600


def test_content_policy_per_role_and_model(open_log) -> None:
    cfg = AuditConfig(
        content_default="none",
        content_rules=(
            ContentRule(mode="encrypt", roles=("analyst",), models=("qwen-*",)),
            ContentRule(mode="hmac", roles=("*",), models=("llama-*",)),
        ),
    )
    content = AuditContent(prompt="card 6222 0000 1111 2222", completion="ok")

    async def go():
        log = await open_log(cfg)
        encrypted = await log.append(event(1), content)  # analyst + qwen-7b
        hashed = await log.append(event(2), content)  # teller + llama-8b
        dropped = await log.append(event(3, model="other"), content)
        opened = await log.read_content(encrypted)
        match = await log.content_matches(hashed, "card 6222 0000 1111 2222")
        miss = await log.content_matches(hashed, "something else")
        with pytest.raises(AuditNotFoundError):
            await log.read_content(dropped)
        with pytest.raises(AuditIntegrityError):
            await log.read_content(hashed)
        stored = (await log.get(hashed)).content
        await log.close()
        return opened, match, miss, stored

    opened, match, miss, stored = asyncio.run(go())
    assert opened == content
    assert match == {"prompt": True, "completion": False}
    assert miss == {"prompt": False, "completion": False}
    # The card's digits with their spaces: an HMAC's hex or base64 can hold "6222" by chance
    # (this assertion failed that way now and then), never a space.
    assert "6222 0000" not in repr(stored) and "6222 0000" not in repr(content)


def test_search_filters_and_cursor_pagination(open_log, clock) -> None:
    async def go():
        log = await open_log()
        for i in range(30):
            clock.advance(1)
            await log.append(event(i))
        await log.append(event(30, event_type=EventType.AUTHORIZATION_DENIAL, decision=Decision.DENY))
        pages, cursor = [], None
        while True:
            page = await log.search(AuditQuery(model="qwen-7b", role="analyst", limit=4, cursor=cursor))
            pages.append([r.event.request_id for r in page.records])
            cursor = page.next_cursor
            if cursor is None:
                break
        findings = await log.search(AuditQuery(finding="pii.card"))
        denied = await log.search(AuditQuery(decision="deny"))
        timed = await log.search(AuditQuery(since="2026-11-30T00:53:25Z", until="2026-11-30T00:53:28Z"))
        no_like = await log.search(AuditQuery(role="analys_"))
        agg = await log.aggregates(AuditQuery())
        await log.close()
        return pages, findings, denied, timed, no_like, agg

    pages, findings, denied, timed, no_like, agg = asyncio.run(go())
    flat = [rid for page in pages for rid in page]
    assert flat == [f"req-{i}" for i in range(1, 30, 2)]
    assert [len(p) for p in pages] == [4, 4, 4, 3]
    assert [r.event.request_id for r in findings.records] == [f"req-{i}" for i in (0, 5, 10, 15, 20, 25, 30)]
    assert [r.event.request_id for r in denied.records] == ["req-30"]
    assert [r.event.request_id for r in timed.records] == ["req-4", "req-5", "req-6"]
    assert no_like.records == []
    usage = {(u.model, u.role): u.num_requests for u in agg.usage}
    assert usage[("qwen-7b", "analyst")] == 15 and usage[("llama-8b", "teller")] == 15
    assert [(d.key, d.count) for d in agg.denials] == [("authorization_denial", 1)]
    assert sum(h.count for h in agg.filter_hits) == 14


def test_bad_cursor_and_limit_are_query_errors() -> None:
    from audit.errors import AuditQueryError
    from audit.query import decode_cursor

    with pytest.raises(AuditQueryError):
        decode_cursor("not-a-cursor!")
    with pytest.raises(AuditQueryError):
        AuditQuery(limit=0)


def test_archive_moves_old_segment_and_both_halves_still_verify(open_log, clock, tmp_path: Path) -> None:
    cfg = AuditConfig(checkpoint_every=5, retention_online_days=90)

    async def go():
        log = await open_log(cfg)
        for i in range(12):
            await log.append(event(i))
        clock.advance(100 * 86_400)
        for i in range(12, 15):
            await log.append(event(i))
        entry = await log.archive(tmp_path)
        live, archives = await log.verify(), await log.verify_archives()
        seq = await log.append(event(99))
        page = await log.search(AuditQuery())
        await log.close()
        return entry, live, archives, seq, page

    entry, live, archives, seq, page = asyncio.run(go())
    assert (entry.first_seq, entry.last_seq) == (1, 10)
    assert live.ok, live.problem
    assert archives.ok, archives.problem
    assert page.records[0].seq == 11 and seq == 17
    segment = Path(entry.path)
    segment.write_text(segment.read_text().replace("req-3", "req-X"))

    async def reverify():
        log = await open_log(cfg)
        report = await log.verify_archives()
        await log.close()
        return report

    tampered = asyncio.run(reverify())
    assert not tampered.ok and "modified" in tampered.problem


def test_second_sink_gets_refused_events(open_log, tmp_path: Path) -> None:
    from tests.audit_doubles import MemorySink

    sink = MemorySink()

    async def go():
        log = await open_log(second_sink=sink)
        blocker = sqlite3.connect(tmp_path / "audit" / "audit.db")
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(AuditUnavailableError):
            await log.append(event(7))
        blocker.rollback()
        blocker.close()
        await log.close()

    asyncio.run(go())
    assert [e.event_type for e in sink.events] == [EventType.AUDIT_OUTAGE, EventType.INFERENCE]
    assert sink.events[1].request_id == "req-7"
