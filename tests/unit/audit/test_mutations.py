"""Mutation suite: every kind of tampering with an export bundle or the live store is caught."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.bundle import verify_bundle, verify_store
from audit.checkpoint import Checkpoint, ExportSeal
from audit.config import AuditConfig
from audit.errors import AuditConfigError
from audit.log import AuditLog
from audit.record import RecordRow, hash_body, record_from_row
from audit.signer import CheckpointSigner
from audit.witness import WitnessError
from tests.audit_doubles import sample_event as event

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
    for table in ("audit_records", "audit_checkpoints", "audit_archives"):
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


# --- Truncation, rollback, forged archives and key swaps, as `strongroom audit verify` sees them.
# An attacker here owns the data directory's audit store and key files but not the pinned public
# key (outside data_dir) nor, unless said, the witness file.


def _seed_cli(tmp_path: Path, *, pinned: bool) -> tuple[Path, Path]:
    """A log of 22 records (checkpoints every 5, a final one at 22) and its CLI config."""
    data = tmp_path / "data"

    async def go() -> bytes:
        log = await AuditLog.open(AuditConfig(checkpoint_every=5), data)
        for i in range(20):
            await log.append(event(i))
        pem = log.signer.public_key_pem()
        await log.close()
        return pem

    pem = asyncio.run(go())
    pinned_key = tmp_path / "pinned" / "audit.pub"
    pinned_key.parent.mkdir()
    pinned_key.write_bytes(pem)
    config = tmp_path / "strongroom.toml"
    audit_section = f'public_key_file = "{pinned_key}"\n' if pinned else ""
    config.write_text(f'data_dir = "{data}"\n[audit]\ncheckpoint_every = 5\n{audit_section}')
    return config, data


def _cli_verify(config: Path, *extra: str):
    from click.testing import CliRunner

    from strongroom.cli.audit import audit

    return CliRunner().invoke(audit, ["verify", "--config", str(config), *extra])


def _db_rows(db: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute(query).fetchall()
    conn.close()
    return rows


def _resign_store(data: Path, attacker: Ed25519PrivateKey) -> None:
    """Key swap: re-sign every checkpoint with the attacker's key and put that key in the key file."""
    db = data / "audit" / "audit.db"
    signer = CheckpointSigner(attacker)
    statements, previous = [], None
    for idx, body in _db_rows(db, "SELECT idx, body FROM audit_checkpoints ORDER BY idx"):
        payload = {**Checkpoint(**json.loads(body)).payload(), "key_id": signer.key_id}
        if previous is not None:
            payload["prev"] = previous.digest()
        previous = Checkpoint(**payload)
        resigned = json.dumps({**payload, "signature": signer.sign("checkpoint", payload)})
        statements.append(f"UPDATE audit_checkpoints SET body = '{resigned}' WHERE idx = {idx}")
    _tamper(db, *statements)
    key_file = data / "keys" / "audit-signing-key.pem"
    key_file.unlink()
    key_file.write_bytes(
        attacker.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _forge_archive_row(data: Path, last_seq: int, path: str, sha256: str) -> None:
    db = data / "audit" / "audit.db"
    [(head,)] = _db_rows(db, f"SELECT hash FROM audit_records WHERE seq = {last_seq}")
    _tamper(
        db,
        f"DELETE FROM audit_records WHERE seq <= {last_seq}",
        f"INSERT INTO audit_archives VALUES (1, {last_seq}, '{head}', '{path}', '{sha256}')",
    )


def _forged_file(data: Path) -> tuple[str, str]:
    forged = data / "audit" / "archive" / "segment-forged.jsonl"
    forged.parent.mkdir(parents=True)
    forged.write_text('{"type": "header"}\n')
    return str(forged), hashlib.sha256(forged.read_bytes()).hexdigest()


def _witness_lines(data: Path) -> tuple[Path, list[str]]:
    path = data / "witness" / "audit-checkpoints.jsonl"
    return path, path.read_text().splitlines(keepends=True)


def _tail_cut(data: Path) -> None:
    _tamper(
        data / "audit" / "audit.db",
        "DELETE FROM audit_records WHERE seq > 15",
        "DELETE FROM audit_checkpoints WHERE seq > 15",
    )


def _newest_checkpoint_cut(data: Path) -> None:
    _tamper(
        data / "audit" / "audit.db",
        "DELETE FROM audit_checkpoints WHERE idx = (SELECT max(idx) FROM audit_checkpoints)",
    )


def _first_checkpoint_cut(data: Path) -> None:
    _tamper(data / "audit" / "audit.db", "DELETE FROM audit_checkpoints WHERE idx = 1")


def _head_cut(data: Path) -> None:
    _tamper(data / "audit" / "audit.db", "DELETE FROM audit_records WHERE seq <= 4")


def _head_cut_forged_row_mid_window(data: Path) -> None:
    _forge_archive_row(data, 4, str(data / "audit" / "archive" / "gone.jsonl"), "0" * 64)


def _head_cut_forged_row_at_checkpoint(data: Path) -> None:
    _forge_archive_row(data, 5, *_forged_file(data))


def _head_cut_archived_by_export(data: Path) -> None:
    """A genuinely sealed export of records 1..4 passed off as an archive: no checkpoint ends at 4."""

    async def export() -> Path:
        log = await AuditLog.open(AuditConfig(checkpoint_every=5), data, record_lifecycle=False)
        path = data / "audit" / "archive" / "segment-export.jsonl"
        path.parent.mkdir(parents=True)
        await log.export(path, first_seq=1, last_seq=4)
        await log.close()
        return path

    path = asyncio.run(export())
    _forge_archive_row(data, 4, str(path), hashlib.sha256(path.read_bytes()).hexdigest())


def _head_cut_archive_file_deleted(data: Path) -> None:
    async def archive_then_delete() -> None:
        three_days_on = AuditConfig(checkpoint_every=5, retention_online_days=1)
        log = await AuditLog.open(three_days_on, data, clock=lambda: time.time() + 3 * 86_400)
        entry = await log.archive(data)
        await log.close()
        assert entry is not None
        Path(entry.path).unlink()

    asyncio.run(archive_then_delete())


def _key_swapped(data: Path) -> None:
    _resign_store(data, Ed25519PrivateKey.generate())


def _witness_line_edited(data: Path) -> None:
    path, lines = _witness_lines(data)
    lines[1] = lines[1].replace('"seq":10', '"seq":9')
    path.write_text("".join(lines))


def _witness_line_deleted(data: Path) -> None:
    path, lines = _witness_lines(data)
    path.write_text("".join(lines[:1] + lines[2:]))


def _rolled_back(data: Path) -> None:
    """Copy the store, let the gateway write on, put the old copy back."""
    audit_dir = data / "audit"
    saved = data.parent / "saved-audit"
    shutil.copytree(audit_dir, saved)

    async def write_on() -> None:
        log = await AuditLog.open(AuditConfig(checkpoint_every=5), data)
        for i in range(10):
            await log.append(event(100 + i))
        await log.close()

    asyncio.run(write_on())
    shutil.rmtree(audit_dir)
    shutil.copytree(saved, audit_dir)


TRUNCATIONS = [
    ("tail-with-its-checkpoints", _tail_cut, "witnessed but is missing"),
    ("newest-checkpoint", _newest_checkpoint_cut, "witnessed but is missing"),
    ("first-checkpoint", _first_checkpoint_cut, "checkpoints 1..1 are missing"),
    ("head", _head_cut, "record 1 missing"),
    ("head-forged-archive-row", _head_cut_forged_row_mid_window, "is missing"),
    ("head-forged-archive-file", _head_cut_forged_row_at_checkpoint, "not a strongroom audit export"),
    ("head-archived-by-export", _head_cut_archived_by_export, "where no signed checkpoint ends"),
    ("archive-file-deleted", _head_cut_archive_file_deleted, "is missing"),
    ("key-files-swapped", _key_swapped, "not signed by the trusted key"),
    ("witness-line-edited", _witness_line_edited, "witness"),
    ("witness-line-deleted", _witness_line_deleted, "edited, removed or reordered"),
    ("rolled-back", _rolled_back, "witnessed but is missing"),
]


@pytest.mark.parametrize(("name", "tamper", "problem"), TRUNCATIONS, ids=[t[0] for t in TRUNCATIONS])
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_truncation_rollback_and_key_swap_fail_verify(tmp_path: Path, name, tamper, problem, pinned) -> None:
    config, data = _seed_cli(tmp_path, pinned=pinned)
    intact = _cli_verify(config)
    assert intact.exit_code == 0 and intact.output.startswith("OK:"), intact.output
    tamper(data)
    result = _cli_verify(config)
    assert result.exit_code == 1 and "FAILED" in result.output, result.output
    if name == "key-files-swapped" and pinned:
        problem = "not the pinned key"  # refused before any record is read
    assert problem in result.output, result.output


def test_key_swap_with_a_rewritten_witness_fails_only_against_a_pinned_key(tmp_path: Path) -> None:
    """Owning the witness too defeats everything but the pin: why the key lives outside data_dir."""
    config, data = _seed_cli(tmp_path, pinned=False)
    _key_swapped(data)
    (data / "witness" / "audit-checkpoints.jsonl").unlink()
    asyncio.run(_reopen_and_close(data))  # the gateway restarts and the new witness adopts the forgery
    unpinned = _cli_verify(config)
    assert unpinned.exit_code == 0 and "no trusted public key is pinned" in unpinned.output
    pinned = _cli_verify(config, "--public-key", str(tmp_path / "pinned" / "audit.pub"))
    assert pinned.exit_code == 1 and "not signed by the trusted key" in pinned.output


async def _reopen_and_close(data: Path) -> None:
    log = await AuditLog.open(AuditConfig(checkpoint_every=5), data)
    await log.close()


def test_gateway_start_refuses_a_store_behind_its_witness(tmp_path: Path) -> None:
    _, data = _seed_cli(tmp_path, pinned=False)
    _rolled_back(data)
    with pytest.raises(WitnessError, match="truncated or rolled back"):
        asyncio.run(_reopen_and_close(data))


def test_gateway_start_refuses_a_signing_key_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    _, data = _seed_cli(tmp_path, pinned=False)
    _key_swapped(data)
    cfg = AuditConfig(public_key_file=str(tmp_path / "pinned" / "audit.pub"))

    async def reopen() -> None:
        await AuditLog.open(cfg, data)

    with pytest.raises(AuditConfigError, match="not the pinned key"):
        asyncio.run(reopen())


def test_unpinned_verify_warns_and_fails_in_production_mode(tmp_path: Path) -> None:
    config, _ = _seed_cli(tmp_path, pinned=False)
    dev = _cli_verify(config)
    assert dev.exit_code == 0 and "WARNING: no trusted public key is pinned" in dev.output
    config.write_text(config.read_text() + "create_signing_key = false\n")
    production = _cli_verify(config)
    assert production.exit_code == 4 and production.output.startswith("OK:")
