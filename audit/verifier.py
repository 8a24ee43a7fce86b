"""Walks records and checkpoints and says whether they are intact, naming the first bad record.

Per record: consecutive sequence, prev == the previous record's hash, hash == SHA-256 of its
body, index columns == the event. Per checkpoint: signature under the *trusted* key, index and
prev link to the previous checkpoint, head == the recomputed chain hash at its seq. A record
whose local checks pass but whose window fails its checkpoint is reported as the first record
after the last good checkpoint (the earliest one that may have been rewritten).

A whole live log (``is_whole_log``) must also start its checkpoints at index 1 (checkpoints are
never archived away), have a signed checkpoint exactly where its archived records end (so an
archive entry cannot be invented), and hold every checkpoint a witness saw, unchanged
(``witnessed``; see ``audit/witness.py``): cutting its tail or restoring an older copy shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

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
    key_pinned: bool = False
    """Whether signatures were checked against a pinned key; if not, the log only proved itself
    consistent with the key stored beside it (see ``audit/trusted_key.py``)."""
    witnessed_seq: int = 0
    """Records up to here match a checkpoint that a witness outside the store holds."""

    @classmethod
    def failure(cls, seq: int, problem: str, *, key_pinned: bool = False) -> VerifyReport:
        """A report that failed before any record was walked."""
        return cls(
            ok=False,
            num_records=0,
            num_checkpoints=0,
            last_seq=0,
            sealed_seq=0,
            first_bad_seq=seq,
            problem=problem,
            key_pinned=key_pinned,
        )


class Witnessed(NamedTuple):
    """What the witnesses saw, small enough for a year of checkpoints: digests by index, and the newest."""

    digests: dict[int, str]
    newest: Checkpoint | None


class ChainVerifier:
    def __init__(
        self,
        verifier: CheckpointVerifier,
        log_id: str,
        *,
        start_seq: int,
        start_prev: str,
        is_whole_log: bool = False,
        witnessed: Witnessed | None = None,
    ) -> None:
        self._verifier = verifier
        self._log_id = log_id
        self._is_whole_log = is_whole_log
        self._witnessed = witnessed or Witnessed({}, None)
        self._witnessed_seq = 0
        self._start_seq = start_seq
        self._is_start_sealed = start_seq == 0
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
        elif self._is_whole_log and cp.index != 1:
            raise _Bad(first_unsealed, f"checkpoints 1..{cp.index - 1} are missing")
        elif cp.index == 1 and cp.prev != checkpoint_genesis(self._log_id):
            raise _Bad(first_unsealed, "checkpoint 1 does not start from the genesis")
        seen = self._witnessed.digests.get(cp.index)
        if seen is not None and seen != cp.digest():
            raise _Bad(
                first_unsealed,
                f"checkpoint {cp.index} differs from the one a witness holds: the store was rolled back or rewritten",
            )
        if cp.seq > self._seq:
            raise _Bad(self._seq + 1, f"log truncated: checkpoint {cp.index} covers record {cp.seq}")
        known = self._hashes.get(cp.seq)
        if known is not None and known != cp.head:
            raise _Bad(
                first_unsealed, f"records {first_unsealed}..{cp.seq} do not match checkpoint {cp.index}"
            )
        if cp.seq == self._start_seq and known is not None:
            self._is_start_sealed = True
        if seen is not None:
            self._witnessed_seq = max(self._witnessed_seq, cp.seq)
        self._last_good_cp = cp
        self._sealed = max(self._sealed, cp.seq)
        self._hashes = {self._seq: self._hash}
        self.num_checkpoints += 1

    def finish(self) -> None:
        """After every record and checkpoint: what is missing at the ends of a whole log."""
        if not self._is_whole_log:
            return
        if not self._is_start_sealed:
            raise _Bad(
                self._start_seq,
                f"the archived records are said to end at record {self._start_seq}, where no signed "
                "checkpoint ends: the archive entry is forged or the log's head was cut",
            )
        newest_seen = self._witnessed.newest
        newest_here = 0 if self._last_good_cp is None else self._last_good_cp.index
        if newest_seen is not None and newest_seen.index > newest_here:
            raise _Bad(
                self._sealed + 1,
                f"checkpoint {newest_seen.index} (records up to {newest_seen.seq}) was witnessed but is "
                "missing from the store: the log was truncated or rolled back",
            )

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
            witnessed_seq=self._witnessed_seq,
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
        chain.finish()
    except _Bad as bad:
        return chain, bad
    return chain, None


def require_ok(report: VerifyReport) -> VerifyReport:
    if not report.ok:
        raise AuditIntegrityError(report.problem)
    return report
