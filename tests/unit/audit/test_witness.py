"""The witness as the log uses it: every checkpoint published, start-up checks, failures, syslog."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest

from audit.bundle import iter_checkpoints
from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.query import AuditQuery
from audit.signer import CheckpointVerifier
from audit.sqlite_store import SqliteStore
from audit.witness import Witness, WitnessError
from audit.witness_file import FileWitness
from audit.witness_syslog import SyslogWitness
from tests.audit_doubles import sample_event as event


def _store_checkpoints(tmp_path: Path) -> list:
    store = SqliteStore(tmp_path / "audit" / "audit.db")
    try:
        return list(iter_checkpoints(store))
    finally:
        store.close()


def test_every_checkpoint_the_log_writes_is_witnessed(open_log, tmp_path: Path) -> None:
    async def go() -> CheckpointVerifier:
        log = await open_log(AuditConfig(checkpoint_every=3))
        for i in range(10):
            await log.append(event(i))
        await log.checkpoint()
        verifier = log.signer.verifier
        report = await log.verify()
        await log.close()
        assert report.ok and report.witnessed_seq == report.sealed_seq == report.last_seq
        return verifier

    verifier = asyncio.run(go())
    witness = FileWitness(tmp_path / "witness" / "audit-checkpoints.jsonl")
    stored = _store_checkpoints(tmp_path)
    assert list(witness.witnessed(verifier, stored[0].log_id)) == stored


def test_a_failing_witness_never_refuses_an_append(open_log, tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the witness folder should be")

    async def go() -> tuple[int, int]:
        log = await open_log(AuditConfig(checkpoint_every=2, witness_file="blocker/witness.jsonl"))
        for i in range(5):
            await log.append(event(i))
        witness = log.witness
        assert witness is not None
        # Publication runs on the witness's own thread: read its count once close has drained
        # it (read before, it raced the thread and saw one failure of two on a loaded machine).
        await log.close()
        return witness.num_failures, len(await _reopen_tail(open_log))

    failures, num_records = asyncio.run(go())
    assert failures >= 2 and num_records >= 6


async def _reopen_tail(open_log) -> list:
    log = await open_log(AuditConfig(witness_file=""), record_lifecycle=False)
    try:
        return await log.tail(100)
    finally:
        await log.close()


def test_an_empty_witness_adopts_an_existing_log(open_log, tmp_path: Path) -> None:
    async def go() -> None:
        log = await open_log(AuditConfig(witness_file=""))
        await log.append(event(1))
        await log.close()
        log = await open_log()  # the witness is configured from now on
        report = await log.verify()
        start = (await log.search(AuditQuery(event_type="service_start"))).records[-1]
        await log.close()
        assert report.ok and report.witnessed_seq > 0
        assert start.event.detail.startswith("audit witness started at checkpoint")  # adoption is on record

    asyncio.run(go())


def test_a_witness_of_another_log_refuses_start(open_log, tmp_path: Path) -> None:
    async def go() -> None:
        log = await open_log()
        await log.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp_path / 'audit' / 'audit.db'}{suffix}").unlink(missing_ok=True)
        await open_log()  # a fresh store (new log id) beside the old log's witness

    with pytest.raises(WitnessError, match="belongs to audit log"):
        asyncio.run(go())


def test_witnesses_that_disagree_fail_verify(open_log, tmp_path: Path) -> None:
    async def go() -> str:
        log = await open_log(AuditConfig(checkpoint_every=2))
        for i in range(4):
            await log.append(event(i))
        await log.checkpoint()
        other = tmp_path / "other.jsonl"
        cps = await log.run_reader(lambda: list(iter_checkpoints(log.store)))
        fork = {**cps[-1].payload(), "time": "2026-12-03T00:00:00.000000Z"}  # signed, but not the stored one
        forged = Checkpoint(**fork, signature=log.signer.sign("checkpoint", fork))
        FileWitness(other, log.signer).publish(forged)
        own = FileWitness(tmp_path / "witness" / "audit-checkpoints.jsonl")
        log.witness = Witness([], [own, FileWitness(other)])
        report = await log.verify()
        await log.close()
        return report.problem

    assert "disagree" in asyncio.run(go())


def test_syslog_receives_each_checkpoint_signed(open_log, tmp_path: Path) -> None:
    collector = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    collector.bind(("127.0.0.1", 0))
    collector.settimeout(5)
    port = collector.getsockname()[1]

    async def go() -> CheckpointVerifier:
        log = await open_log(AuditConfig(checkpoint_every=2, witness_syslog=f"127.0.0.1:{port}"))
        await log.append(event(1))
        verifier = log.signer.verifier
        await log.close()
        return verifier

    try:
        verifier = asyncio.run(go())
        message = collector.recv(65_536).decode()
    finally:
        collector.close()
    assert message.startswith("<37>strongroom-audit[")
    body = json.loads(message.split(" checkpoint ", 1)[1])
    payload = {k: v for k, v in body.items() if k != "signature"}
    assert body["index"] == 1 and verifier.is_valid("checkpoint", payload, body["signature"])


def test_syslog_witness_reports_an_unreachable_socket(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        SyslogWitness(str(tmp_path / "no-such-socket")).publish(
            Checkpoint(log_id="l", index=1, seq=0, head="0", time="t", prev="0", key_id="k")
        )


class _StuckPublisher:
    """A witness that hangs (an unreachable collector) until released."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.published: list[Checkpoint] = []

    def publish(self, checkpoint: Checkpoint) -> None:
        self.gate.wait(timeout=5)
        self.published.append(checkpoint)

    def close(self) -> None:
        pass


def test_a_stuck_witness_never_holds_up_the_writer() -> None:
    stuck = _StuckPublisher()
    witness = Witness([stuck], [])
    cps = [Checkpoint(log_id="l", index=i, seq=i, head="0", time="t", prev="0", key_id="k") for i in (1, 2)]
    for cp in cps:
        witness.publish_later(cp)  # returns at once: the writer thread goes on
    assert stuck.published == []
    stuck.gate.set()
    witness.flush()
    assert stuck.published == cps  # in order
    witness.close()
