"""Retention: older segments leave the online store as sealed bundle files, still verifiable.

A segment always ends at a signed checkpoint, so the online log restarts from a signed head:

    online:  [1 ............ c_k][c_k + 1 ............ head]
    archive:  segment-1-c_k.jsonl (records, checkpoints, export seal) + sha256 in audit_archives

``verify_archives`` checks every file (hash, seal, chain) and that segments join up with each
other and with the first online record. Files are never deleted here: the ``retention_days``
minimum (PCI DSS 10.5.1: 12 months) is for the operator's archive storage to enforce.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec

from audit.bundle import export_bundle, iter_checkpoints, verify_bundle
from audit.errors import AuditQueryError
from audit.signer import CheckpointSigner, CheckpointVerifier
from audit.store import ArchiveEntry, AuditStore
from audit.verifier import VerifyReport

_DAY_US = 86_400 * 1_000_000


def archive_older_than(
    store: AuditStore, signer: CheckpointSigner, archive_dir: Path, *, cutoff_us: int, now_us: int
) -> ArchiveEntry | None:
    """Archive every record up to the newest checkpoint whose records are all older than the cutoff."""
    archives = store.archives()
    first = archives[-1].last_seq + 1 if archives else 1
    last = 0
    for cp in iter_checkpoints(store):
        row = store.get(cp.seq) if cp.seq >= first else None
        if row is not None and row.time_us < cutoff_us:
            last = cp.seq
    if last < first:
        return None
    archive_dir.mkdir(parents=True, exist_ok=True)
    path = archive_dir / f"segment-{first:012d}-{last:012d}.jsonl"
    seal = export_bundle(store, signer, path, first_seq=first, last_seq=last, now_us=now_us)
    if seal.last_seq != last or seal.first_seq != first:
        raise AuditQueryError("archive segment is not contiguous; nothing pruned")
    entry = ArchiveEntry(first, last, seal.head, str(path), _sha256(path))
    store.prune(entry)
    return entry


def online_cutoff_us(now_us: int, retention_online_days: int) -> int:
    return now_us - retention_online_days * _DAY_US


class ArchiveReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    segments: list[VerifyReport]
    problem: str = ""


def verify_archives(store: AuditStore, verifier: CheckpointVerifier) -> ArchiveReport:
    reports: list[VerifyReport] = []
    expected_first = 1
    entries = store.archives()
    for entry in entries:
        path = Path(entry.path)
        if not path.exists():
            return ArchiveReport(ok=False, segments=reports, problem=f"{path} is missing")
        if _sha256(path) != entry.sha256:
            return ArchiveReport(ok=False, segments=reports, problem=f"{path} was modified")
        if entry.first_seq != expected_first:
            return ArchiveReport(
                ok=False, segments=reports, problem=f"segment gap before record {entry.first_seq}"
            )
        report = verify_bundle(path, verifier)
        reports.append(report)
        if not report.ok or report.last_seq != entry.last_seq:
            return ArchiveReport(
                ok=False, segments=reports, problem=f"{path}: {report.problem or 'wrong range'}"
            )
        expected_first = entry.last_seq + 1
    first_online = store.rows(expected_first - 1, 1)
    if entries and first_online and first_online[0].prev_hash != entries[-1].head:
        return ArchiveReport(
            ok=False, segments=reports, problem="online log does not continue the last segment"
        )
    return ArchiveReport(ok=True, segments=reports)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
