"""Selection bundles: one user's records (optionally within a time range), signed, verifiable
offline by ``strongroom audit verify --file`` like a range bundle.

A range bundle (``bundle.py``) is a contiguous chain segment, so it proves itself link by link;
a user's records are scattered through the chain, and the records between them are other
people's, which an export for one user must not carry. So a selection bundle holds only the
matching records, and its seal signs the selection and the list of what was exported:

    {"type": "header", "format": "strongroom-audit-selection/1", "log_id", "key_id", "selection"}
    {"type": "record", <RecordRow columns>}          matching records, ascending seq
    {"type": "seal", <SelectionSeal>}                last line

``digest`` is SHA-256 over ``"<seq> <hash>\\n"`` of every record in order. Verification, with
the trusted public key only: the seal's signature; each record's hash recomputed from its body
(event, content, prev link) and its index columns agreeing with the event; each record matching
the selection; ascending, and exactly the sealed list (none added, removed or reordered). What it
proves: these records are, unchanged, what the log held for that selection when the log's key
signed the export; that the log itself is intact is what ``strongroom audit verify`` proves.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from audit.checkpoint import unsigned_payload
from audit.query import MAX_LIMIT, AuditQuery
from audit.record import RecordRow, hash_body, iso_to_us, record_from_row, row_from_record, us_to_iso
from audit.signer import CheckpointSigner, CheckpointVerifier
from audit.store import AuditStore
from audit.verifier import VerifyReport

__all__ = [
    "SELECTION_FORMAT",
    "Selection",
    "SelectionSeal",
    "export_selection",
    "matching_rows",
    "verify_selection",
]

SELECTION_FORMAT = "strongroom-audit-selection/1"


class Selection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which records: one subject's, with ``since`` <= time < ``until`` when given (RFC 3339)."""

    subject: str
    since: str | None = None
    until: str | None = None

    def query(self, limit: int = MAX_LIMIT) -> AuditQuery:
        return AuditQuery(subject=self.subject, since=self.since, until=self.until, limit=limit)

    def matches(self, row: RecordRow) -> bool:
        return (
            row.subject == self.subject
            and (self.since is None or row.time_us >= iso_to_us(self.since))
            and (self.until is None or row.time_us < iso_to_us(self.until))
        )


class SelectionSeal(msgspec.Struct, frozen=True, kw_only=True):
    log_id: str
    selection: Selection
    num_records: int
    first_seq: int
    last_seq: int
    digest: str
    exported_at: str
    key_id: str
    signature: str = ""

    def payload(self) -> dict[str, Any]:
        return unsigned_payload(self)


def matching_rows(store: AuditStore, selection: Selection) -> Iterator[RecordRow]:
    """Every record of the selection, ascending (blocking: on the log's reader thread)."""
    query, after = selection.query(), 0
    while True:
        rows = store.search(query, after, MAX_LIMIT)
        yield from rows
        if len(rows) < MAX_LIMIT:
            return
        after = rows[-1].seq


def export_selection(
    store: AuditStore, signer: CheckpointSigner, path: Path, selection: Selection, *, now_us: int
) -> SelectionSeal:
    """Write the records matching ``selection`` and a signed seal (fsynced); may hold no record."""
    log_id = store.head().log_id
    digest = hashlib.sha256()
    num_records, first_seq, last_seq = 0, 0, 0
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as out:
        header = {
            "type": "header",
            "format": SELECTION_FORMAT,
            "log_id": log_id,
            "key_id": signer.key_id,
            "selection": msgspec.to_builtins(selection),
        }
        out.write(msgspec.json.encode(header) + b"\n")
        for row in matching_rows(store, selection):
            out.write(msgspec.json.encode({"type": "record", **row._asdict()}) + b"\n")
            digest.update(f"{row.seq} {row.hash}\n".encode())
            first_seq = first_seq or row.seq
            last_seq = row.seq
            num_records += 1
        unsigned = SelectionSeal(
            log_id=log_id,
            selection=selection,
            num_records=num_records,
            first_seq=first_seq,
            last_seq=last_seq,
            digest=digest.hexdigest(),
            exported_at=us_to_iso(now_us),
            key_id=signer.key_id,
        )
        seal = msgspec.structs.replace(unsigned, signature=signer.sign("selection", unsigned.payload()))
        out.write(msgspec.json.encode({"type": "seal", **msgspec.to_builtins(seal)}) + b"\n")
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    return seal


def verify_selection(items: list[dict[str, Any]], verifier: CheckpointVerifier) -> VerifyReport:
    """``items``: the bundle's decoded lines, header first and seal last (checked by the caller)."""
    try:
        seal = msgspec.convert({k: v for k, v in items[-1].items() if k != "type"}, SelectionSeal)
    except msgspec.ValidationError as exc:
        return VerifyReport.failure(0, f"seal unreadable: {exc}")
    if seal.key_id != verifier.key_id or not verifier.is_valid("selection", seal.payload(), seal.signature):
        return VerifyReport.failure(seal.first_seq, "seal is not signed by the trusted key")
    header = items[0]
    said = (header.get("log_id"), header.get("key_id"), header.get("selection"))
    if said != (seal.log_id, seal.key_id, msgspec.to_builtins(seal.selection)):
        return VerifyReport.failure(seal.first_seq, "header disagrees with the seal")
    digest, previous, count = hashlib.sha256(), 0, 0
    for item in items[1:-1]:
        fields = {k: v for k, v in item.items() if k != "type"}
        try:
            if item.get("type") != "record":
                raise ValueError(f"unexpected line type {item.get('type')!r}")
            row = RecordRow(**fields)
            record = record_from_row(row)
        except (TypeError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            return _bad(previous + 1, f"malformed line after record {previous}: {exc}", count)
        if row.seq <= previous:
            return _bad(row.seq, f"record {row.seq} duplicated or out of order", count)
        if hash_body(record.body()) != row.hash:
            return _bad(row.seq, f"record {row.seq} was modified (hash mismatch)", count)
        if row_from_record(record) != row:
            return _bad(row.seq, f"record {row.seq} index columns disagree with the event", count)
        if not seal.selection.matches(row):
            return _bad(row.seq, f"record {row.seq} is outside the sealed selection", count)
        digest.update(f"{row.seq} {row.hash}\n".encode())
        previous, count = row.seq, count + 1
    if count != seal.num_records or digest.hexdigest() != seal.digest or previous != seal.last_seq:
        return _bad(previous + 1, "records added, removed or changed since the seal", count)
    return VerifyReport(
        ok=True,
        num_records=count,
        num_checkpoints=0,
        last_seq=seal.last_seq,
        sealed_seq=seal.last_seq,
    )


def _bad(seq: int, problem: str, count: int) -> VerifyReport:
    return VerifyReport(
        ok=False,
        num_records=count,
        num_checkpoints=0,
        last_seq=seq - 1,
        sealed_seq=0,
        first_bad_seq=seq,
        problem=problem,
    )
