"""The witness: every signed checkpoint is also published outside the audit store.

A store's owner can delete its newest records together with their checkpoints, or put back an
older copy of the database; what is left verifies, because it is a true prefix of the log. So
each checkpoint also goes to places that owner cannot silently rewrite (an append-only file on
another volume or owner, a syslog collector, a PostgreSQL table writable only by another role),
and ``verify`` holds the store to every checkpoint a readable witness has seen:

    store:    cp 1 .. cp 7                      (records 1..7,000)
    witness:  cp 1 .. cp 9                      -> "checkpoint 9 was witnessed but is missing"
    witness:  cp 7 with another digest          -> "the store was rolled back or rewritten"

The writer hands each checkpoint over once its transaction is durable, so a witness is never
ahead of its store except after tampering (start-up refuses then). Publication runs in order on
a thread of its own: a slow or unreachable witness (an fsync, a PostgreSQL connect timeout)
never holds up appends. A failed publication is logged and does not refuse appends: the records
are durable in the store, and the next checkpoint (at most ``checkpoint_interval_s`` later) is
published all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.errors import AuditIntegrityError
from audit.signer import CheckpointSigner, CheckpointVerifier
from audit.store import AuditStore
from audit.verifier import Witnessed

_log = logging.getLogger(__name__)


class WitnessError(AuditIntegrityError):
    """A witness was edited, is signed by another key, belongs to another log, or is unreadable."""


class CheckpointPublisher(Protocol):
    def publish(self, checkpoint: Checkpoint) -> None:
        """Make ``checkpoint`` durable at the witness; raises on failure."""
        ...

    def close(self) -> None: ...


class WitnessReader(Protocol):
    def witnessed(self, verifier: CheckpointVerifier, log_id: str) -> Iterator[Checkpoint]:
        """Every checkpoint this witness holds, each signed by ``verifier``'s key; raises ``WitnessError``."""
        ...

    def newest(self, verifier: CheckpointVerifier) -> Checkpoint | None:
        """The witnessed checkpoint with the highest index (cheap: start-up calls it)."""
        ...


class Witness:
    """The configured witnesses: all are published to, the readable ones are checked."""

    def __init__(self, publishers: Sequence[CheckpointPublisher], readers: Sequence[WitnessReader]) -> None:
        self._publishers = tuple(publishers)
        self._readers = tuple(readers)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-witness")
        self.num_failures = 0
        """Publications that failed since start (each logged)."""

    def __repr__(self) -> str:
        return f"Witness(publishers={self._publishers!r})"

    @property
    def is_readable(self) -> bool:
        return bool(self._readers)

    def publish_later(self, checkpoint: Checkpoint) -> None:
        """Queue ``checkpoint`` for publication (in order) and return at once; ``flush`` waits for it."""
        self._pool.submit(self.publish, checkpoint)

    def flush(self) -> None:
        """Wait until every queued publication is done."""
        self._pool.submit(lambda: None).result()

    def publish(self, checkpoint: Checkpoint) -> None:
        """Publish to every witness now; failures are counted and logged, never raised (see module doc)."""
        for publisher in self._publishers:
            try:
                publisher.publish(checkpoint)
            except Exception as exc:  # a witness must never take the writer thread down
                self.num_failures += 1
                _log.error(
                    "audit checkpoint %d not published to %r: %s",
                    checkpoint.index,
                    publisher,
                    type(exc).__name__,
                )

    def close(self) -> None:
        """Finish the queued publications, then close the witnesses."""
        self._pool.shutdown(wait=True)
        for publisher in self._publishers:
            publisher.close()

    def witnessed(self, verifier: CheckpointVerifier, log_id: str) -> Witnessed:
        """Every witnessed checkpoint's digest by index; witnesses that disagree raise ``WitnessError``."""
        digests: dict[int, str] = {}
        newest: Checkpoint | None = None
        for reader in self._readers:
            for cp in reader.witnessed(verifier, log_id):
                digest = cp.digest()
                if digests.setdefault(cp.index, digest) != digest:
                    raise WitnessError(f"witnesses disagree about checkpoint {cp.index}")
                if newest is None or cp.index > newest.index:
                    newest = cp
        return Witnessed(digests, newest)

    def check_store(self, store: AuditStore, verifier: CheckpointVerifier) -> str:
        """At start-up: refuse a store that lacks, or differs from, the newest witnessed checkpoint.

        An empty witness adopts the store's newest checkpoint (a new witness on an existing log,
        or one deleted: the returned note goes into the start record, so adoption is on record).
        """
        head = store.head()
        is_any_empty = False
        for reader in self._readers:
            newest = reader.newest(verifier)
            if newest is None:
                is_any_empty = True
                continue
            if newest.log_id != head.log_id:
                raise WitnessError(
                    f"witness {reader!r} belongs to audit log {newest.log_id}, the store is log "
                    f"{head.log_id}: the store was replaced (move the witness aside only to start a new log)"
                )
            stored = store.checkpoints(newest.index - 1, 1)
            if not stored or stored[0].index != newest.index or stored[0].digest() != newest.digest():
                raise WitnessError(
                    f"checkpoint {newest.index} (records up to {newest.seq}) was witnessed by {reader!r} "
                    "but the store lacks it or holds another: truncated or rolled back; run "
                    "`strongroom audit verify`"
                )
        if is_any_empty and head.checkpoint is not None:
            _log.warning(
                "audit witness starts at checkpoint %d (records up to %d)",
                head.checkpoint.index,
                head.checkpoint.seq,
            )
            self.publish(head.checkpoint)
            return f"audit witness started at checkpoint {head.checkpoint.index} (records up to {head.checkpoint.seq})"
        return ""


def open_witness(cfg: AuditConfig, data_dir: Path, signer: CheckpointSigner) -> Witness | None:
    """The witnesses ``cfg`` names (None when it names none)."""
    publishers: list[CheckpointPublisher] = []
    readers: list[WitnessReader] = []
    if cfg.witness_file:
        from audit.witness_file import FileWitness

        file_witness = FileWitness(cfg.resolve(data_dir, cfg.witness_file), signer)
        publishers.append(file_witness)
        readers.append(file_witness)
    if cfg.witness_postgres_dsn:
        from audit.witness_postgres import PostgresWitness

        pg_witness = PostgresWitness(cfg.witness_postgres_dsn, cfg.witness_postgres_schema)
        publishers.append(pg_witness)
        readers.append(pg_witness)
    if cfg.witness_syslog:
        from audit.witness_syslog import SyslogWitness

        publishers.append(SyslogWitness(cfg.witness_syslog))
    return Witness(publishers, readers) if publishers else None
