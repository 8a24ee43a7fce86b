"""The writer-thread side of the log: seals a batch into the chain and commits it in one go.

Only one ``ChainWriter`` call runs at a time (the log's single writer thread). The in-memory
head is a cache of the store's: after any failure it is reloaded before the next batch, and a
conflict (another process appended first) re-seals the batch on the fresh head and retries.
A store shared by several gateways (``SharedAuditStore``) hands the head to the writer under
its lock instead, so the batch is sealed on the true head and never conflicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from audit.checkpoint import Checkpoint, checkpoint_genesis
from audit.config import AuditConfig
from audit.content_guard import ContentGuard
from audit.errors import AuditUnavailableError
from audit.record import AuditContent, EncodedEvent, RecordRow, encode_event, seal_row, us_to_iso
from audit.signer import CheckpointSigner
from audit.store import AuditStore, SharedAuditStore, StoreConflictError, StoreHead
from audit.witness import Witness
from common.audit_event import AuditEvent, Decision, EventType

_MAX_CONFLICT_RETRIES = 5


class Entry(NamedTuple):
    encoded: EncodedEvent
    """The event with its time, already canonical (see ``encode_event``)."""
    content: AuditContent | None
    served: bool = False
    """The client already has its answer (a stream's final record): refusing this append cuts the
    stream short with an error event instead of answering 503, and the outage record says so."""

    @property
    def event(self) -> AuditEvent:
        return self.encoded.event


class _Outage(NamedTuple):
    since_us: int
    num_refused: int
    """Appends refused whose request was answered 503."""
    last_error: str
    landed: tuple[tuple[int, int], ...] = ()
    """Seq ranges whose appends were reported refused but that the store did keep."""
    num_cut: int = 0
    """Appends refused after the client had its answer: streams ended with an error, not [DONE]."""


class _Sealed(NamedTuple):
    """A batch chained onto a head, ready to insert."""

    rows: list[RecordRow]
    head: StoreHead
    checkpoint: Checkpoint | None


class _Uncertain(NamedTuple):
    """A batch whose commit raised: the store may or may not have kept it (e.g. lost COMMIT ack)."""

    first_seq: int
    last_seq: int
    last_hash: str


class ChainWriter:
    def __init__(
        self,
        cfg: AuditConfig,
        store: AuditStore,
        signer: CheckpointSigner,
        guard: ContentGuard,
        head: StoreHead,
        clock: Callable[[], float],
        witness: Witness | None = None,
    ) -> None:
        self._cfg = cfg
        self._witness = witness
        self._store = store
        self._shared_store = store if isinstance(store, SharedAuditStore) else None
        self._signer = signer
        self._guard = guard
        self._clock = clock
        self._head = head
        self._is_stale = False
        self._outage: _Outage | None = None
        self._uncertain: list[_Uncertain] = []
        self._last_checkpoint_at = clock()

    @property
    def head(self) -> StoreHead:
        return self._head

    @property
    def num_unsealed(self) -> int:
        sealed = self._head.checkpoint.seq if self._head.checkpoint is not None else 0
        return self._head.seq - sealed

    def seconds_to_checkpoint(self) -> float:
        return max(0.0, self._cfg.checkpoint_interval_s - (self._clock() - self._last_checkpoint_at))

    def is_checkpoint_due(self, num_new: int, *, heartbeat: bool) -> bool:
        if self.num_unsealed + num_new >= self._cfg.checkpoint_every:
            return True
        if self.seconds_to_checkpoint() > 0:
            return False
        return heartbeat or self.num_unsealed + num_new > 0

    def idle(self) -> None:
        """No append is waiting: the store's writer-side housekeeping (SQLite: rewind the WAL)."""
        self._store.idle()

    @property
    def has_outage(self) -> bool:
        """Refusals are waiting for the outage record that the next commit starts with."""
        return self._outage is not None

    def note_failure(self, num_refused: int, error: BaseException, *, num_cut: int = 0) -> bool:
        """A commit failed: reload the head before the next one; True when this starts an outage."""
        self._is_stale = True
        return self.note_refused(num_refused, type(error).__name__, num_cut=num_cut)

    def note_refused(self, num_refused: int, cause: str, *, num_cut: int = 0) -> bool:
        """Count appends whose callers were told "refused"; True when this starts an outage."""
        if self._outage is None:
            now_us = int(self._clock() * 1_000_000)
            self._outage = _Outage(now_us, num_refused, cause, num_cut=num_cut)
            return True
        self._outage = self._outage._replace(
            num_refused=self._outage.num_refused + num_refused,
            num_cut=self._outage.num_cut + num_cut,
            last_error=cause,
        )
        return False

    def note_landed(self, seqs: Sequence[int]) -> None:
        """Committed records whose callers had already been told "refused" (after ``note_refused``)."""
        assert self._outage is not None
        ranges: list[tuple[int, int]] = []
        for seq in sorted(seqs):
            if ranges and ranges[-1][1] == seq - 1:
                ranges[-1] = (ranges[-1][0], seq)
            else:
                ranges.append((seq, seq))
        self._outage = self._outage._replace(landed=self._outage.landed + tuple(ranges))

    def commit(self, entries: Sequence[Entry], *, checkpoint: bool, final: bool = False) -> list[int]:
        """Seal and store ``entries``; returns their sequence numbers once durable."""
        if self._shared_store is not None:
            return self._commit_shared(self._shared_store, entries, checkpoint or final, final)
        for _ in range(_MAX_CONFLICT_RETRIES):
            if self._is_stale:
                self._head = self._store.head()
                self._is_stale = False
                self._settle_uncertain()
            sealed = self._prepare(entries, checkpoint or final, final)
            try:
                self._store.append(sealed.rows, sealed.checkpoint)
            except StoreConflictError:
                self._is_stale = True
                continue
            except Exception:
                self._failed(sealed)
                raise
            return self._committed(sealed)
        raise AuditUnavailableError("audit store: too many concurrent writers")

    def _commit_shared(
        self, store: SharedAuditStore, entries: Sequence[Entry], with_checkpoint: bool, final: bool
    ) -> list[int]:
        sealed: list[_Sealed] = []

        def seal(head: StoreHead) -> tuple[list[RecordRow], Checkpoint | None]:
            self._head = head  # the true head, read under the store's lock
            self._is_stale = False
            if self._uncertain:
                self._settle_uncertain()
            sealed.append(self._prepare(entries, with_checkpoint, final))
            return sealed[-1].rows, sealed[-1].checkpoint

        for _ in range(_MAX_CONFLICT_RETRIES):
            try:
                store.append_at_head(seal)
            except StoreConflictError:
                continue  # a writer that skips the lock (an older release mid-upgrade) got there first
            except Exception:
                if sealed:
                    self._failed(sealed[-1])
                self._is_stale = True
                raise
            return self._committed(sealed[-1])
        self._is_stale = True
        raise AuditUnavailableError("audit store: too many concurrent writers")

    def _prepare(self, entries: Sequence[Entry], with_checkpoint: bool, final: bool) -> _Sealed:
        batch = list(entries)
        if self._outage is not None:
            batch.insert(0, self._outage_entry(self._outage))
        rows, new_head = self._seal(batch)
        return _Sealed(rows, new_head, self._checkpoint(new_head, final) if with_checkpoint else None)

    def _failed(self, sealed: _Sealed) -> None:
        self._is_stale = True
        real = sealed.rows[1:] if self._outage is not None else sealed.rows
        if real:
            self._uncertain.append(_Uncertain(real[0].seq, real[-1].seq, real[-1].hash))

    def _committed(self, sealed: _Sealed) -> list[int]:
        self._head = sealed.head._replace(checkpoint=sealed.checkpoint or self._head.checkpoint)
        if sealed.checkpoint is not None:
            self._last_checkpoint_at = self._clock()
            if self._witness is not None:
                self._witness.publish_later(sealed.checkpoint)  # durable in the store first: never ahead
        seqs = [row.seq for row in sealed.rows]
        if self._outage is not None:
            self._outage = None
            seqs = seqs[1:]
        return seqs

    def _settle_uncertain(self) -> None:
        """Find out which failed commits the store kept after all; the outage record names them.

        Their callers were told "refused" (the gateway answered 503), so a kept record must not
        pass for a served request: the outage record lists the ranges for auditors.
        """
        landed = []
        for batch in self._uncertain:
            if batch.last_seq > self._head.seq:
                continue
            found = self._store.rows(batch.last_seq - 1, 1)
            if found and found[0].seq == batch.last_seq and found[0].hash == batch.last_hash:
                landed.append((batch.first_seq, batch.last_seq))
        self._uncertain = []
        if landed and self._outage is not None:
            self._outage = self._outage._replace(landed=self._outage.landed + tuple(landed))

    def _seal(self, batch: Sequence[Entry]) -> tuple[list[RecordRow], StoreHead]:
        seq, prev = self._head.seq, self._head.hash
        rows = []
        for entry in batch:
            seq += 1
            stored = None
            if entry.content is not None:
                mode = self._guard.mode_for(entry.event)
                stored = self._guard.protect(mode, entry.content, log_id=self._head.log_id, seq=seq)
            row = seal_row(entry.encoded, seq, prev, stored)
            rows.append(row)
            prev = row.hash
        return rows, self._head._replace(seq=seq, hash=prev)

    def _checkpoint(self, head: StoreHead, final: bool) -> Checkpoint:
        previous = self._head.checkpoint
        unsigned = Checkpoint(
            log_id=head.log_id,
            index=1 if previous is None else previous.index + 1,
            seq=head.seq,
            head=head.hash,
            time=us_to_iso(int(self._clock() * 1_000_000)),
            prev=checkpoint_genesis(head.log_id) if previous is None else previous.digest(),
            key_id=self._signer.key_id,
            final=final,
        )
        signature = self._signer.sign("checkpoint", unsigned.payload())
        return Checkpoint(**{**unsigned.payload(), "signature": signature})

    def _outage_entry(self, outage: _Outage) -> Entry:
        now_us = int(self._clock() * 1_000_000)
        cut = (
            f"; {outage.num_cut} streams ended with an error event instead of [DONE]"
            if outage.num_cut
            else ""
        )
        event = AuditEvent(
            event_type=EventType.AUDIT_OUTAGE,
            decision=Decision.ERROR,
            reason=f"audit store unavailable; {outage.num_refused} appends refused (answered 503){cut}",
            detail=f"from {us_to_iso(outage.since_us)} to {us_to_iso(now_us)}; last error {outage.last_error}"
            + "".join(
                f"; records {a}-{b} were stored although their appends were reported refused"
                for a, b in outage.landed
            ),
        )
        return Entry(encode_event(event, now_us), None)
