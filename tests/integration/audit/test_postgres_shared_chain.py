"""Several writers on one PostgreSQL schema make one chain, signed with one key.

Two ``AuditLog``s stand in for two gateways: each has its own writer thread and connections,
so they meet only in the database, as two processes would. (The HA test under
tests/integration/gateway runs real ``strongroom serve`` processes.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.log import AuditLog
from audit.postgres_store import PostgresStore
from audit.record import RecordRow, encode_event, seal_row
from audit.store import StoreConflictError, StoreHead
from common.audit_event import AuditEvent, Decision, EventType
from tests.audit_doubles import sample_event

pytestmark = pytest.mark.integration


async def _burst(log: AuditLog, name: str, n: int) -> dict[str, int]:
    async def one(i: int) -> tuple[str, int]:
        rid = f"{name}-{i}"
        event = AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW, request_id=rid)
        return rid, await log.append(event)

    done: dict[str, int] = {}
    for start in range(0, n, 50):  # waves of 50 concurrent appends: batches interleave across writers
        done.update(await asyncio.gather(*(one(i) for i in range(start, min(n, start + 50)))))
    return done


def test_two_writers_append_to_one_chain_signed_by_one_key(schema_and_role, tmp_path: Path) -> None:
    schema, role = schema_and_role
    dsn = f"host=127.0.0.1 port=5432 user={role} dbname=test"
    key = tmp_path / "shared" / "audit-signing-key.pem"
    cfg = AuditConfig(signing_key_file=str(key), checkpoint_every=40)

    async def go() -> None:
        one = await AuditLog.open(cfg, tmp_path / "one", store=PostgresStore(dsn, schema))
        two = await AuditLog.open(
            AuditConfig(signing_key_file=str(key), checkpoint_every=40, create_signing_key=False),
            tmp_path / "two",
            store=PostgresStore(dsn, schema),
        )
        try:
            a, b = await asyncio.gather(_burst(one, "one", 600), _burst(two, "two", 600))
            seqs = sorted([*a.values(), *b.values()])
            assert len(set(seqs)) == 1200, "two appends were given one sequence number"
            await one.checkpoint()
            await two.checkpoint()
            for log in (one, two):
                report = await log.verify()
                assert report.ok, report.problem
                assert report.num_records == report.last_seq == report.sealed_seq
            records = {r.event.request_id: r.seq for r in await one.tail(1300) if r.event.request_id}
            assert records == {**a, **b}
            assert report.num_checkpoints >= 1200 // 100  # both writers sealed into one checkpoint chain
        finally:
            await one.close()
            await two.close()
        report = await AuditLog.open(cfg, tmp_path / "three", store=PostgresStore(dsn, schema))
        try:
            final = await report.verify()
            assert final.ok and final.newest_checkpoint_final, final.problem
        finally:
            await report.close()

    asyncio.run(go())


def _sealed(first: int, n: int) -> list[RecordRow]:
    return [seal_row(encode_event(sample_event(s), s), s, "00" * 32, None) for s in range(first, first + n)]


def test_a_locked_append_that_conflicts_keeps_nothing_and_the_connection_goes_on(schema_and_role) -> None:
    """A writer that skips the lock (an older release mid-upgrade) takes a sequence number while
    the batch is being sealed: the whole batch, checkpoint included, is rolled back, the caller
    hears of a conflict, and the same connection serves the next append."""
    schema, role = schema_and_role
    dsn = f"host=127.0.0.1 port=5432 user={role} dbname=test"
    store, intruder = PostgresStore(dsn, schema), PostgresStore(dsn, schema)
    store.open("l")

    def seal_into_a_taken_seq(head: StoreHead) -> tuple[list[RecordRow], Checkpoint]:
        intruder.append(_sealed(head.seq + 2, 1), None)  # no lock: lands while ours is held
        checkpoint = Checkpoint(
            log_id="l", index=1, seq=head.seq + 3, head="h", time="t", prev="p", key_id="k"
        )
        return _sealed(head.seq + 1, 3), checkpoint

    with pytest.raises(StoreConflictError):
        store.append_at_head(seal_into_a_taken_seq)
    assert [r.seq for r in store.rows(0, 10)] == [2] and store.head().checkpoint is None
    store.append_at_head(lambda head: (_sealed(head.seq + 1, 1), None))
    assert [r.seq for r in store.rows(0, 10)] == [2, 3]
    store.close()
    intruder.close()
