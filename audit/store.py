"""The storage seam: one Protocol, a SQLite and a PostgreSQL implementation, one factory.

Stores are synchronous and append-only. The log calls write methods from a single writer
thread, read methods from a reader thread and ``maintain`` from a maintenance thread; a store
keeps one connection per thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.query import AuditQuery
from audit.record import RecordRow


class StoreHead(NamedTuple):
    log_id: str
    seq: int
    hash: str
    checkpoint: Checkpoint | None
    """The newest checkpoint, or None before the first."""


class ArchiveEntry(NamedTuple):
    """An archived segment: records ``first_seq..last_seq`` moved to a sealed file."""

    first_seq: int
    last_seq: int
    head: str
    path: str
    sha256: str


class AuditStore(Protocol):
    def open(self, new_log_id: str) -> StoreHead:
        """Create the schema if needed (the log id is only used for a new, empty store)."""
        ...

    def head(self) -> StoreHead: ...

    def append(self, rows: Sequence[RecordRow], checkpoint: Checkpoint | None) -> None:
        """Insert rows (and the checkpoint) in one durable transaction, or raise and keep nothing."""
        ...

    def rows(self, after_seq: int, limit: int) -> list[RecordRow]:
        """Rows with seq > after_seq, ascending."""
        ...

    def tail(self, n: int) -> list[RecordRow]:
        """The newest n rows, ascending."""
        ...

    def get(self, seq: int) -> RecordRow | None: ...

    def search(self, query: AuditQuery, after_seq: int, limit: int) -> list[RecordRow]: ...

    def checkpoints(self, after_index: int, limit: int) -> list[Checkpoint]: ...

    def checkpoint_covering(self, seq: int) -> Checkpoint | None:
        """The first checkpoint with checkpoint.seq >= seq."""
        ...

    def archives(self) -> list[ArchiveEntry]: ...

    def prune(self, entry: ArchiveEntry) -> None:
        """Maintenance only: record the archive and drop its rows (bypasses the append-only guard)."""
        ...

    def maintain(self) -> None:
        """Housekeeping off the write path, called from the maintenance thread after each checkpoint."""
        ...

    def idle(self) -> None:
        """Writer-thread housekeeping, called when no append is waiting (must not raise)."""
        ...

    def close(self) -> None: ...


SealBatch = Callable[[StoreHead], tuple[Sequence[RecordRow], Checkpoint | None]]
"""Chains a batch onto the head it is given: the rows (and checkpoint) to insert after it."""


@runtime_checkable
class SharedAuditStore(AuditStore, Protocol):
    """A store several gateways append to at once (PostgreSQL): the database orders them."""

    def append_at_head(self, seal: SealBatch) -> None:
        """In one transaction under a lock the database holds until commit: read the head, let
        ``seal`` chain the batch onto it, insert. Writers queue at the lock instead of racing for
        sequence numbers, so the chain has no gap or fork however many gateways write."""
        ...


def open_store(cfg: AuditConfig, data_dir: Path) -> AuditStore:
    if cfg.backend == "postgres":
        from audit.postgres_store import PostgresStore

        assert cfg.postgres_dsn is not None  # AuditConfig guarantees it
        return PostgresStore(cfg.postgres_dsn, cfg.postgres_schema)
    from audit.sqlite_store import SqliteStore

    return SqliteStore(cfg.resolve(data_dir, cfg.sqlite_path), lock_wait_s=cfg.writer_lock_wait_s)


class StoreConflictError(Exception):
    """Another writer appended first (a sequence number or checkpoint index is taken)."""
