"""Walks records and checkpoints and says whether they are intact, naming the first bad record.

Per record: consecutive sequence, prev == the previous record's hash, hash == SHA-256 of its
body, index columns == the event. Per checkpoint: signature under the *trusted* key, index and
prev link to the previous checkpoint, head == the recomputed chain hash at its seq. A record
whose local checks pass but whose window fails its checkpoint is reported as the first record
after the last good checkpoint (the earliest one that may have been rewritten).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from audit.checkpoint import Checkpoint, checkpoint_genesis
from audit.errors import AuditIntegrityError
from audit.record import RecordRow, hash_body, record_from_row, row_from_record
from audit.signer import CheckpointVerifier


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    num_records: int
    num_checkpoints: int
    last_seq: int
    sealed_seq: int
    """Records up to here are covered by a valid signature."""
    first_bad_seq: int | None = None
    problem: str = ""
    newest_checkpoint_time: str = ""
    """Checkpoints come at least every interval while a writer runs; an old, non-final newest
    checkpoint means the writer died or the tail (records and checkpoints) was cut off."""
    newest_checkpoint_final: bool = False


class ChainVerifier:
    def __init__(self, verifier: CheckpointVerifier, log_id: str, *, start_seq: int, start_prev: str) -> None:
        self._verifier = verifier
        self._log_id = log_id
        self._seq = start_seq
        self._hash = start_prev
        self._hashes: dict[int, str] = {start_seq: start_prev}
        self._last_good_cp: Checkpoint | None = None
        self._sealed = start_seq
        self.num_records = 0
        self.num_checkpoints = 0

    def feed_record(self, row: RecordRow) -> None:
        expected = self._seq + 1
        if row.seq != expected:
            kind = "missing" if row.seq > expected else "duplicated or out of order"
            raise _Bad(
                expected if row.seq > expected else row.seq, f"record {expected} {kind} (found {row.seq})"
            )
        try:
            record = record_from_row(row)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            raise _Bad(row.seq, f"record {row.seq} is not decodable: {exc}") from exc
        if row.prev_hash != self._hash:
            raise _Bad(row.seq, f"record {row.seq} does not link to record {row.seq - 1}")
        if hash_body(record.body()) != row.hash:
            raise _Bad(row.seq, f"record {row.seq} was modified (hash mismatch)")
        if row_from_record(record) != row:
            raise _Bad(row.seq, f"record {row.seq} index columns disagree with the event")
        self._seq, self._hash = row.seq, row.hash
        self._hashes[row.seq] = row.hash
        self.num_records += 1

    def feed_checkpoint(self, cp: Checkpoint) -> None:
        """Call once all records up to ``cp.seq`` have been fed."""
        first_unsealed = self._sealed + 1
        if cp.key_id != self._verifier.key_id or not self._verifier.is_valid(
            "checkpoint", cp.payload(), cp.signature
        ):
            raise _Bad(first_unsealed, f"checkpoint {cp.index} is not signed by the trusted key")
        if cp.log_id != self._log_id:
            raise _Bad(first_unsealed, f"checkpoint {cp.index} belongs to another log")
        previous = self._last_good_cp
        if previous is not None:
            if cp.index != previous.index + 1 or cp.prev != previous.digest():
                raise _Bad(
                    first_unsealed, f"checkpoint {cp.index} does not link to checkpoint {previous.index}"
                )
        elif cp.index == 1 and cp.prev != checkpoint_genesis(self._log_id):
            raise _Bad(first_unsealed, "checkpoint 1 does not start from the genesis")
        if cp.seq > self._seq:
            raise _Bad(self._seq + 1, f"log truncated: checkpoint {cp.index} covers record {cp.seq}")
        known = self._hashes.get(cp.seq)
        if known is not None and known != cp.head:
            raise _Bad(
                first_unsealed, f"records {first_unsealed}..{cp.seq} do not match checkpoint {cp.index}"
            )
        self._last_good_cp = cp
        self._sealed = max(self._sealed, cp.seq)
        self._hashes = {self._seq: self._hash}
        self.num_checkpoints += 1

    def report(self, *, ok: bool = True, bad: _Bad | None = None) -> VerifyReport:
        return VerifyReport(
            ok=ok and bad is None,
            num_records=self.num_records,
            num_checkpoints=self.num_checkpoints,
            last_seq=self._seq,
            sealed_seq=self._sealed,
            first_bad_seq=None if bad is None else bad.seq,
            problem="" if bad is None else bad.problem,
            newest_checkpoint_time="" if self._last_good_cp is None else self._last_good_cp.time,
            newest_checkpoint_final=self._last_good_cp is not None and self._last_good_cp.final,
        )

    @property
    def head_hash(self) -> str:
        return self._hash

    @property
    def seq(self) -> int:
        return self._seq


class _Bad(Exception):
    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(problem)
        self.seq = seq
        self.problem = problem


def verify_stream(
    chain: ChainVerifier, rows: Iterable[RecordRow], checkpoints: Iterable[Checkpoint]
) -> tuple[ChainVerifier, _Bad | None]:
    """Interleave ascending rows and checkpoints: a checkpoint is checked once its seq is reached."""
    cps: Iterator[Checkpoint] = iter(checkpoints)
    pending = next(cps, None)
    try:
        while pending is not None and pending.seq <= chain.seq:
            chain.feed_checkpoint(pending)
            pending = next(cps, None)
        for row in rows:
            chain.feed_record(row)
            while pending is not None and pending.seq <= chain.seq:
                chain.feed_checkpoint(pending)
                pending = next(cps, None)
        while pending is not None:
            chain.feed_checkpoint(pending)
            pending = next(cps, None)
    except _Bad as bad:
        return chain, bad
    return chain, None


def require_ok(report: VerifyReport) -> VerifyReport:
    if not report.ok:
        raise AuditIntegrityError(report.problem)
    return report
