"""Export bundles (JSON lines, verifiable offline) and CSV exports, and verification of both logs.

Bundle layout, one JSON object per line:

    {"type": "header", "format": "strongroom-audit-export/1", "log_id", "key_id", ...}
    {"type": "record", <RecordRow columns>}          ascending seq, contiguous
    {"type": "checkpoint", <Checkpoint>}             after the record it covers
    {"type": "seal", <ExportSeal>}                   last line; signs the exact range

Verification trusts only the public key it is given, never one named inside the bundle. One
user's records are exported as a selection bundle instead (``selection_bundle.py``); ``verify_bundle``
checks either.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from audit.checkpoint import Checkpoint, ExportSeal
from audit.export_progress import Progress, RecordCounter
from audit.record import RecordRow, genesis_hash, us_to_iso
from audit.selection_bundle import SELECTION_FORMAT, verify_selection
from audit.signer import CheckpointSigner, CheckpointVerifier
from audit.store import AuditStore
from audit.verifier import ChainVerifier, VerifyReport, Witnessed, _Bad, verify_stream

FORMAT = "strongroom-audit-export/1"
_PAGE = 1000


def iter_rows(store: AuditStore, after_seq: int, last_seq: int | None = None) -> Iterator[RecordRow]:
    while True:
        page = store.rows(after_seq, _PAGE)
        for row in page:
            if last_seq is not None and row.seq > last_seq:
                return
            yield row
        if len(page) < _PAGE:
            return
        after_seq = page[-1].seq


def iter_checkpoints(store: AuditStore) -> Iterator[Checkpoint]:
    after = 0
    while True:
        page = store.checkpoints(after, _PAGE)
        yield from page
        if len(page) < _PAGE:
            return
        after = page[-1].index


def verify_store(
    store: AuditStore, verifier: CheckpointVerifier, *, witnessed: Witnessed | None = None
) -> VerifyReport:
    """Walk the live log (after its archived segments) against the trusted key and the witnessed
    checkpoints; the segment files themselves are ``archive.verify_archives``'s."""
    head = store.head()
    archives = store.archives()
    start_seq, start_prev = (0, genesis_hash(head.log_id))
    if archives:
        start_seq, start_prev = archives[-1].last_seq, archives[-1].head
    chain = ChainVerifier(
        verifier,
        head.log_id,
        start_seq=start_seq,
        start_prev=start_prev,
        is_whole_log=True,
        witnessed=witnessed,
    )
    chain, bad = verify_stream(chain, iter_rows(store, start_seq), iter_checkpoints(store))
    return chain.report(bad=bad)


def export_bundle(
    store: AuditStore,
    signer: CheckpointSigner,
    path: Path,
    *,
    first_seq: int,
    last_seq: int,
    now_us: int,
    progress: Progress | None = None,
) -> ExportSeal:
    """Write records first_seq..last_seq with their checkpoints and a signed seal (fsynced)."""
    counter = RecordCounter(first_seq, last_seq, progress)
    log_id = store.head().log_id
    checkpoints = [cp for cp in iter_checkpoints(store) if first_seq <= cp.seq <= last_seq]
    tmp = path.with_name(path.name + ".tmp")
    num_records, first_prev, head = 0, "", ""
    with tmp.open("wb") as out:
        header = {"type": "header", "format": FORMAT, "log_id": log_id, "key_id": signer.key_id}
        out.write(msgspec.json.encode(header) + b"\n")
        cps = iter(checkpoints)
        pending = next(cps, None)
        for row in iter_rows(store, first_seq - 1, last_seq):
            if num_records == 0:
                first_prev = row.prev_hash
            out.write(msgspec.json.encode({"type": "record", **row._asdict()}) + b"\n")
            num_records += 1
            counter.step(num_records)
            head = row.hash
            while pending is not None and pending.seq <= row.seq:
                out.write(msgspec.json.encode({"type": "checkpoint", **msgspec.to_builtins(pending)}) + b"\n")
                pending = next(cps, None)
        unsigned = ExportSeal(
            log_id=log_id,
            first_seq=first_seq,
            first_prev=first_prev,
            last_seq=first_seq + num_records - 1,
            head=head,
            num_records=num_records,
            num_checkpoints=len(checkpoints),
            exported_at=us_to_iso(now_us),
            key_id=signer.key_id,
        )
        seal = ExportSeal(**{**unsigned.payload(), "signature": signer.sign("seal", unsigned.payload())})
        out.write(msgspec.json.encode({"type": "seal", **msgspec.to_builtins(seal)}) + b"\n")
        counter.finish(num_records)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    return seal


def verify_bundle(path: Path, verifier: CheckpointVerifier) -> VerifyReport:
    lines = path.read_bytes().splitlines()
    items: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        try:
            items.append(msgspec.json.decode(line, type=dict[str, Any]))
        except msgspec.DecodeError:
            return _failed(0, f"line {number} is not JSON")
    if (
        not items
        or items[0].get("type") != "header"
        or items[0].get("format") not in (FORMAT, SELECTION_FORMAT)
    ):
        return _failed(0, "not a strongroom audit export")
    if items[-1].get("type") != "seal":
        return _failed(0, "bundle has no seal: truncated")
    if items[0].get("format") == SELECTION_FORMAT:
        return verify_selection(items, verifier)
    try:
        seal = msgspec.convert({k: v for k, v in items[-1].items() if k != "type"}, ExportSeal)
    except msgspec.ValidationError as exc:
        return _failed(0, f"seal unreadable: {exc}")
    if seal.key_id != verifier.key_id or not verifier.is_valid("seal", seal.payload(), seal.signature):
        return _failed(seal.first_seq, "seal is not signed by the trusted key")
    chain = ChainVerifier(verifier, seal.log_id, start_seq=seal.first_seq - 1, start_prev=seal.first_prev)
    try:
        for item in items[1:-1]:
            kind = item.pop("type", None)
            if kind == "record":
                chain.feed_record(RecordRow(**item))
            elif kind == "checkpoint":
                chain.feed_checkpoint(msgspec.convert(item, Checkpoint))
            else:
                raise _Bad(chain.seq + 1, f"unexpected line type {kind!r} after record {chain.seq}")
        if chain.seq < seal.last_seq:
            raise _Bad(chain.seq + 1, f"bundle truncated: records {chain.seq + 1}..{seal.last_seq} missing")
        if chain.seq > seal.last_seq or chain.head_hash != seal.head or chain.num_records != seal.num_records:
            raise _Bad(seal.last_seq + 1, "records beyond or different from the sealed range")
        if chain.num_checkpoints != seal.num_checkpoints:
            raise _Bad(seal.first_seq, "checkpoints added or removed")
    except _Bad as bad:
        return chain.report(bad=bad)
    except (TypeError, msgspec.ValidationError) as exc:
        return chain.report(bad=_Bad(chain.seq + 1, f"malformed line after record {chain.seq}: {exc}"))
    return chain.report()


def _failed(seq: int, problem: str) -> VerifyReport:
    return VerifyReport.failure(seq, problem)


CSV_COLUMNS = ("seq", "time", *RecordRow._fields[2:9], "event", "prev_hash", "hash")


def export_csv(
    store: AuditStore, path: Path, *, first_seq: int, last_seq: int, progress: Progress | None = None
) -> int:
    """Spreadsheet view with the chain hashes per row; verify with the JSONL bundle of the same range."""
    counter = RecordCounter(first_seq, last_seq, progress)
    count = write_csv(path, iter_rows(store, first_seq - 1, last_seq), counter.step)
    counter.finish(count)
    return count


def write_csv(path: Path, rows: Iterable[RecordRow], step: Callable[[int], None] | None = None) -> int:
    """``rows`` as CSV (``CSV_COLUMNS``); returns how many."""
    count = 0
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow([row.seq, us_to_iso(row.time_us), *row[2:9], row.event, row.prev_hash, row.hash])
            count += 1
            if step is not None:
                step(count)
    return count
