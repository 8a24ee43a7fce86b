"""The append-only witness file: chained, signed lines; edits, deletions and foreign keys show."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.checkpoint import Checkpoint, checkpoint_genesis
from audit.signer import CheckpointSigner
from audit.witness import WitnessError
from audit.witness_file import FileWitness

LOG_ID = "log-a"


def _checkpoints(signer: CheckpointSigner, num: int, log_id: str = LOG_ID) -> list[Checkpoint]:
    out: list[Checkpoint] = []
    for index in range(1, num + 1):
        unsigned = Checkpoint(
            log_id=log_id,
            index=index,
            seq=index * 10,
            head=f"{index:064x}",
            time="2026-12-03T00:00:00.000000Z",
            prev=checkpoint_genesis(log_id) if not out else out[-1].digest(),
            key_id=signer.key_id,
        )
        out.append(
            Checkpoint(**{**unsigned.payload(), "signature": signer.sign("checkpoint", unsigned.payload())})
        )
    return out


@pytest.fixture
def signer() -> CheckpointSigner:
    return CheckpointSigner(Ed25519PrivateKey.generate())


@pytest.fixture
def witness_path(tmp_path: Path) -> Path:
    return tmp_path / "witness" / "checkpoints.jsonl"


def _published(path: Path, signer: CheckpointSigner, num: int) -> list[Checkpoint]:
    witness = FileWitness(path, signer)
    cps = _checkpoints(signer, num)
    for cp in cps:
        witness.publish(cp)
    return cps


def test_published_checkpoints_read_back_in_order_from_a_private_file(witness_path: Path, signer) -> None:
    cps = _published(witness_path, signer, 4)
    assert list(FileWitness(witness_path).witnessed(signer.verifier, LOG_ID)) == cps
    assert FileWitness(witness_path).newest(signer.verifier) == cps[-1]
    assert stat.S_IMODE(witness_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(witness_path.parent.stat().st_mode) == 0o700


def test_a_missing_file_holds_nothing(witness_path: Path, signer) -> None:
    reader = FileWitness(witness_path)
    assert list(reader.witnessed(signer.verifier, LOG_ID)) == [] and reader.newest(signer.verifier) is None


def _edit(path: Path, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(edit(lines)))


def _rechained(lines: list[str]) -> list[str]:
    """Move the checkpoint of line 2 into line 3's place, keeping line 3's chain fields."""
    second, third = json.loads(lines[1]), json.loads(lines[2])
    third["checkpoint"] = second["checkpoint"]
    return [lines[0], lines[1], json.dumps(third) + "\n", *lines[3:]]


EDITS = [
    ("checkpoint-field", lambda lines: [lines[0], lines[1].replace('"seq":20', '"seq":19'), *lines[2:]]),
    ("middle-line-deleted", lambda lines: [lines[0], *lines[2:]]),
    ("first-line-deleted", lambda lines: lines[1:]),
    ("lines-swapped", lambda lines: [lines[0], lines[2], lines[1], *lines[3:]]),
    ("line-duplicated", lambda lines: [*lines[:2], lines[1], *lines[2:]]),
    ("checkpoint-moved-between-lines", _rechained),
]


@pytest.mark.parametrize(("name", "edit"), EDITS, ids=[e[0] for e in EDITS])
def test_edits_are_detected(witness_path: Path, signer, name, edit) -> None:
    _published(witness_path, signer, 4)
    _edit(witness_path, edit)
    with pytest.raises(WitnessError):
        list(FileWitness(witness_path).witnessed(signer.verifier, LOG_ID))


def test_another_key_or_log_is_refused(witness_path: Path, signer) -> None:
    _published(witness_path, signer, 2)
    other = CheckpointSigner(Ed25519PrivateKey.generate())
    with pytest.raises(WitnessError, match="not signed by the trusted key"):
        list(FileWitness(witness_path).witnessed(other.verifier, LOG_ID))
    with pytest.raises(WitnessError, match="not signed by the trusted key"):
        FileWitness(witness_path).newest(other.verifier)
    with pytest.raises(WitnessError, match="another audit log"):
        list(FileWitness(witness_path).witnessed(signer.verifier, "log-b"))


def test_a_line_torn_by_a_crash_is_skipped_and_the_chain_goes_on(witness_path: Path, signer) -> None:
    cps = _checkpoints(signer, 3)
    witness = FileWitness(witness_path, signer)
    witness.publish(cps[0])
    with witness_path.open("ab") as f:
        f.write(b'{"v":1,"n":2,"prev":"ab')  # power lost mid-line
    assert list(FileWitness(witness_path).witnessed(signer.verifier, LOG_ID)) == cps[:1]
    witness.publish(cps[1])
    witness.publish(cps[2])
    assert list(FileWitness(witness_path).witnessed(signer.verifier, LOG_ID)) == cps


def test_two_writers_on_one_file_chain_correctly(witness_path: Path, signer) -> None:
    """The gateway and a CLI on one host: each re-reads the last line under the lock."""
    cps = _checkpoints(signer, 6)
    gateway, cli = FileWitness(witness_path, signer), FileWitness(witness_path, signer)
    for i, cp in enumerate(cps):
        (gateway if i % 2 else cli).publish(cp)
    assert list(FileWitness(witness_path).witnessed(signer.verifier, LOG_ID)) == cps


def test_newest_is_the_highest_index_even_when_published_out_of_order(witness_path: Path, signer) -> None:
    cps = _checkpoints(signer, 3)
    witness = FileWitness(witness_path, signer)
    for cp in (cps[0], cps[2], cps[1]):
        witness.publish(cp)
    assert witness.newest(signer.verifier) == cps[2]


def test_a_reader_cannot_publish(witness_path: Path, signer) -> None:
    with pytest.raises(WitnessError):
        FileWitness(witness_path).publish(_checkpoints(signer, 1)[0])
