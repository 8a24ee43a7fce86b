"""Operator commands beside the writer: appends through its socket, reads that never write."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from audit.operator_log import OperatorLog
from audit.query import AuditQuery
from audit.sqlite_store import SqliteStore
from audit.writer_socket import WriterSocket
from common.audit_event import AuditEvent, Decision, EventType
from tests.audit_doubles import sample_event

pytestmark = pytest.mark.anyio


def _db(data: Path) -> Path:
    return data / "audit" / "audit.db"


def _access(request_id: str) -> AuditEvent:
    return AuditEvent(
        event_type=EventType.AUDIT_ACCESS, decision=Decision.ALLOW, subject="operator", request_id=request_id
    )


async def test_appends_reach_the_log_through_the_writer_that_holds_it(tmp_path: Path) -> None:
    gateway = await AuditLog.open(AuditConfig(), tmp_path)
    door = await WriterSocket.start(gateway, _db(tmp_path), tmp_path)
    operator = OperatorLog(AuditConfig(), tmp_path)
    seq = await operator.append(_access("from-the-cli"))
    assert (await gateway.get(seq)).event.request_id == "from-the-cli"
    page = await operator.search(AuditQuery(subject="operator"))
    assert [r.seq for r in page.records] == [seq]
    with pytest.raises(AuditUnavailableError, match="operator event"):  # no forged inference records
        await operator.append(sample_event(1, request_id="forged"))
    assert await operator.archive() is None  # done by the gateway: nothing is 90 days old
    await operator.close()
    await door.close()
    await gateway.close()
    assert not door.path.exists()


async def test_an_append_waits_for_a_starting_writers_socket(tmp_path: Path) -> None:
    """The gateway holds the lock a moment before its socket listens: the command retries."""
    gateway = await AuditLog.open(AuditConfig(), tmp_path)
    operator = OperatorLog(AuditConfig(), tmp_path)
    pending = asyncio.create_task(operator.append(_access("early")))
    await asyncio.sleep(0.3)
    assert not pending.done()
    door = await WriterSocket.start(gateway, _db(tmp_path), tmp_path)
    seq = await asyncio.wait_for(pending, 5)
    assert (await gateway.get(seq)).event.request_id == "early"
    await operator.close()
    await door.close()
    await gateway.close()


async def test_with_no_writer_a_command_writes_itself_and_stops_cleanly(tmp_path: Path) -> None:
    log = await AuditLog.open(AuditConfig(), tmp_path)
    await log.close()
    operator = OperatorLog(AuditConfig(), tmp_path)
    assert [r.seq for r in await operator.tail(5)] == [1, 2]  # read-only: nothing written yet
    seq = await operator.append(sample_event(3))
    await operator.close()
    store = SqliteStore.read_only(_db(tmp_path))
    head = store.open("")
    store.close()
    assert head.seq == seq == 3 and head.checkpoint is not None
    assert head.checkpoint.final and head.checkpoint.seq == 3
