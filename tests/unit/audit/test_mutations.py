"""Mutation suite: every kind of tampering with an export bundle or the live store is caught."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.bundle import verify_bundle, verify_store
from audit.checkpoint import Checkpoint, ExportSeal
from audit.config import AuditConfig
from audit.record import RecordRow, hash_body, record_from_row
from audit.signer import CheckpointSigner
from audit.testing import sample_event as event

NUM_EVENTS = 40


@pytest.fixture
def exported(open_log, tmp_path: Path):
    async def go():
        log = await open_log(AuditConfig(checkpoint_every=7))
        for i in range(NUM_EVENTS):
            await log.append(event(i))
        path = tmp_path / "export.jsonl"
        await log.export(path)
        verifier = log.signer.verifier
        await log.close()
        return path, verifier

    return asyncio.run(go())


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, lines: list[dict]) -> Path:
    out = path.with_name("mutated.jsonl")
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def _rehash(line: dict) -> dict:
    """An attacker who recomputes the record's own hash after editing it."""
    row = RecordRow(**{k: v for k, v in line.items() if k != "type"})
    record = record_from_row(row)
    return {**line, "hash": hash_body(record.body())}


def _record_indices(lines: list[dict]) -> list[int]:
    return [i for i, line in enumerate(lines) if line["type"] == "record"]


def test_untouched_bundle_verifies(exported) -> None:
    path, verifier = exported
    report = verify_bundle(path, verifier)
    assert report.ok, report.problem
    assert report.num_records == NUM_EVENTS + 1


def _mutations(lines: list[dict]) -> list[tuple[str, list[dict], int | None]]:
    """(name, mutated lines, expected first bad seq or None when any position is acceptable)."""
    rec = _record_indices(lines)
    out: list[tuple[str, list[dict], int | None]] = []
    for i in rec:
        seq = lines[i]["seq"]
        edited = json.loads(lines[i]["event"])
        edited["subject"] = "mallory"
        m = [dict(x) for x in lines]
        m[i]["event"] = json.dumps(edited, separators=(",", ":"), sort_keys=True)
        out.append((f"modify-event-{seq}", m, seq))
        out.append((f"modify-and-rehash-{seq}", [*m[:i], _rehash(m[i]), *m[i + 1 :]], None))
        m = [dict(x) for x in lines]
        m[i]["subject"] = "mallory"
        out.append((f"modify-index-column-{seq}", m, seq))
        m = [dict(x) for x in lines]
        m[i]["time_us"] += 1
        out.append((f"modify-time-{seq}", m, seq))
        out.append((f"delete-{seq}", lines[:i] + lines[i + 1 :], None))
        out.append((f"duplicate-{seq}", [*lines[: i + 1], lines[i], *lines[i + 1 :]], None))
    for a, b in itertools.pairwise(rec):
        m = list(lines)
        m[a], m[b] = m[b], m[a]
        out.append((f"swap-{lines[a]['seq']}-{lines[b]['seq']}", m, None))
    forged = dict(lines[rec[3]])
    forged["event"] = forged["event"].replace('"request_id":"req-2"', '"request_id":"forged"')
    out.append(("insert-forged", [*lines[: rec[3]], _rehash(forged), *lines[rec[3] :]], None))
    out.append(("truncate-seal", lines[:-1], None))
    out.append(("truncate-records-keep-seal", [*lines[: rec[-3]], lines[-1]], None))
    out.append(("drop-first-record", [lines[0], *lines[rec[0] + 1 :]], None))
    cps = [i for i, line in enumerate(lines) if line["type"] == "checkpoint"]
    out.append(("drop-checkpoint", lines[: cps[1]] + lines[cps[1] + 1 :], None))
    m = [dict(x) for x in lines]
    m[cps[0]]["head"] = "0" * 64
    out.append(("modify-checkpoint", m, None))
    m = [dict(x) for x in lines]
    m[-1]["last_seq"] += 1
    out.append(("modify-seal", m, None))
    return out


def _resign_with(lines: list[dict], signer: CheckpointSigner) -> list[dict]:
    """Key substitution: an attacker rewrites history and re-signs everything with their own key."""
    out = []
    previous: Checkpoint | None = None
    for line in lines:
        line = dict(line)
        if line["type"] == "checkpoint":
            cp = Checkpoint(**{k: v for k, v in line.items() if k != "type"})
            payload = {**cp.payload(), "key_id": signer.key_id}
            if previous is not None:
                payload["prev"] = previous.digest()
            previous = Checkpoint(**payload)
            line.update(payload, signature=signer.sign("checkpoint", payload))
        elif line["type"] == "seal":
            seal = ExportSeal(**{k: v for k, v in line.items() if k != "type"})
            payload = {**seal.payload(), "key_id": signer.key_id}
            line.update(payload, signature=signer.sign("seal", payload))
        elif line["type"] == "header":
            line["key_id"] = signer.key_id
        out.append(line)
    return out


def test_every_mutation_is_detected(exported) -> None:
    path, verifier = exported
    lines = _lines(path)
    mutations = _mutations(lines)
    mutations.append(
        ("key-substitution", _resign_with(lines, CheckpointSigner(Ed25519PrivateKey.generate())), None)
    )
    missed, wrong_position = [], []
    for name, mutated, expected_seq in mutations:
        report = verify_bundle(_write(path, mutated), verifier)
        if report.ok:
            missed.append(name)
        elif expected_seq is not None and report.first_bad_seq != expected_seq:
            wrong_position.append((name, report.first_bad_seq, report.problem))
    assert len(mutations) > 6 * NUM_EVENTS
    assert missed == [], f"{len(missed)}/{len(mutations)} mutations undetected"
    assert wrong_position == []


def test_key_substitution_passes_with_the_attackers_key_only(exported) -> None:
    path, verifier = exported
    attacker = CheckpointSigner(Ed25519PrivateKey.generate())
    resigned = _write(path, _resign_with(_lines(path), attacker))
    assert verify_bundle(resigned, attacker.verifier).ok  # self-consistent...
    report = verify_bundle(resigned, verifier)  # ...but not under the trusted key
    assert not report.ok and "trusted key" in report.problem


def _live_db(open_log, tmp_path: Path):
    async def go():
        log = await open_log(AuditConfig(checkpoint_every=5))
        for i in range(20):
            await log.append(event(i))
        verifier = log.signer.verifier
        await log.close()
        return verifier

    verifier = asyncio.run(go())
    return tmp_path / "audit" / "audit.db", verifier


def _tamper(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db)
    for table in ("audit_records", "audit_checkpoints"):
        conn.execute(f"DROP TRIGGER {table}_no_update")
        conn.execute(f"DROP TRIGGER {table}_no_delete")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


LIVE_MUTATIONS = [
    ("modify", ["UPDATE audit_records SET event = replace(event, 'req-7', 'req-x') WHERE seq = 9"], 9),
    ("index", ["UPDATE audit_records SET subject = 'mallory' WHERE seq = 4"], 4),
    ("delete", ["DELETE FROM audit_records WHERE seq = 12"], 12),
    ("truncate", ["DELETE FROM audit_records WHERE seq > 15"], 16),
    (
        "reorder",
        [
            "UPDATE audit_records SET seq = -1 WHERE seq = 5",
            "UPDATE audit_records SET seq = 5 WHERE seq = 6",
            "UPDATE audit_records SET seq = 6 WHERE seq = -1",
        ],
        5,
    ),
    (
        "checkpoint",
        ["UPDATE audit_checkpoints SET body = replace(body, '\"seq\":10', '\"seq\":9') WHERE idx = 2"],
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "statements", "first_bad"), LIVE_MUTATIONS, ids=[m[0] for m in LIVE_MUTATIONS]
)
def test_live_store_mutations_are_detected(open_log, tmp_path: Path, name, statements, first_bad) -> None:
    db, verifier = _live_db(open_log, tmp_path)
    from audit.sqlite_store import SqliteStore

    store = SqliteStore(db)
    assert verify_store(store, verifier).ok
    _tamper(db, *statements)
    report = verify_store(store, verifier)
    store.close()
    assert not report.ok
    if first_bad is not None:
        assert report.first_bad_seq == first_bad, report.problem


def test_store_rejects_update_and_delete(open_log, tmp_path: Path) -> None:
    db, _ = _live_db(open_log, tmp_path)
    conn = sqlite3.connect(db)
    for statement in (
        "UPDATE audit_records SET subject = 'x'",
        "DELETE FROM audit_records",
        "DELETE FROM audit_checkpoints",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    conn.close()


def test_cutting_the_tail_with_its_checkpoints_leaves_a_stale_non_final_checkpoint(
    open_log, tmp_path: Path
) -> None:
    db, verifier = _live_db(open_log, tmp_path)
    from audit.sqlite_store import SqliteStore

    store = SqliteStore(db)
    intact = verify_store(store, verifier)
    assert intact.newest_checkpoint_final
    _tamper(db, "DELETE FROM audit_records WHERE seq > 15", "DELETE FROM audit_checkpoints WHERE seq > 15")
    cut = verify_store(store, verifier)
    store.close()
    assert cut.ok  # what is left is authentic...
    assert (
        not cut.newest_checkpoint_final
    )  # ...but the clean-shutdown checkpoint is gone: flagged by `verify`
