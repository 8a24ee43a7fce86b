"""One user's records exported as a selection bundle and checked offline by ``strongroom audit
verify --file``: only that user's records travel; any edit, removal, reorder, addition, foreign
record or other key fails."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from audit.bundle import verify_bundle
from audit.config import AuditConfig
from audit.log import AuditLog
from audit.selection_bundle import Selection, export_selection
from audit.signer import CheckpointVerifier
from strongroom.cli.audit import audit
from tests.audit_doubles import sample_event as event


def _export(tmp_path: Path, selection: Selection) -> tuple[Path, Path, list[int]]:
    """Nine records (user0, user1, user2 in turn); the selection's bundle and the public key."""
    bundle, key = tmp_path / "user.jsonl", tmp_path / "audit.pem"

    async def go() -> list[int]:
        log = await AuditLog.open(AuditConfig(), tmp_path / "data")
        try:
            seqs = [await log.append(event(i)) for i in range(9)]
            key.write_bytes(log.signer.public_key_pem())
            await log.run_reader(
                lambda: export_selection(
                    log.store, log.signer, bundle, selection, now_us=1_700_000_000_000_000
                )
            )
            return seqs
        finally:
            await log.close()

    return bundle, key, asyncio.run(go())


def _verify(bundle: Path, key: Path) -> tuple[int, str]:
    result = CliRunner().invoke(audit, ["verify", "--file", str(bundle), "--public-key", str(key)])
    return result.exit_code, result.output


def test_a_users_bundle_holds_only_that_users_records_and_verifies_offline(tmp_path: Path) -> None:
    bundle, key, seqs = _export(tmp_path, Selection(subject="user1"))
    lines = [json.loads(line) for line in bundle.read_text().splitlines()]
    records = [line for line in lines if line["type"] == "record"]
    assert [r["seq"] for r in records] == [seqs[1], seqs[4], seqs[7]]
    assert {r["subject"] for r in records} == {"user1"}
    assert lines[-1]["selection"] == {"subject": "user1", "since": None, "until": None}
    code, output = _verify(bundle, key)
    assert code == 0 and output.startswith(f"OK: 3 records, 0 checkpoints, last seq {seqs[7]}"), output


def _rewrite(bundle: Path, edit: object) -> None:
    lines = bundle.read_text().splitlines()
    edit(lines)  # type: ignore[operator]
    bundle.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda ls: ls.__setitem__(2, ls[2].replace("req-4", "req-5")), "was modified"),
        (lambda ls: ls.pop(2), "added, removed or changed"),
        (lambda ls: ls.insert(1, ls.pop(2)), "out of order"),
        (
            lambda ls: ls.__setitem__(-1, ls[-1].replace('"user1"', '"user2"')),
            "not signed by the trusted key",
        ),
    ],
)
def test_any_change_to_a_users_bundle_fails(tmp_path: Path, edit: object, problem: str) -> None:
    bundle, key, _ = _export(tmp_path, Selection(subject="user1"))
    _rewrite(bundle, edit)
    code, output = _verify(bundle, key)
    assert code == 1 and problem in output, output


def test_another_users_genuine_record_or_another_key_fails(tmp_path: Path) -> None:
    bundle, key, _ = _export(tmp_path, Selection(subject="user1"))
    other, _, _ = _export(tmp_path / "again", Selection(subject="user2"))
    foreign = other.read_text().splitlines()[1]  # a real record, with a hash that checks out
    _rewrite(bundle, lambda ls: ls.insert(1, foreign))
    code, output = _verify(bundle, key)
    assert code == 1 and "outside the sealed selection" in output, output

    mine, _, _ = _export(tmp_path / "third", Selection(subject="user1"))
    assert _verify(mine, tmp_path / "again" / "audit.pem")[0] == 1


def test_a_time_range_narrows_the_users_bundle(tmp_path: Path) -> None:
    bundle, key, _ = _export(
        tmp_path, Selection(subject="user1", since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z")
    )
    report = verify_bundle(bundle, CheckpointVerifier.from_pem(key.read_bytes()))
    assert report.ok and report.num_records == 0
