"""The audit log as an operator's command sees it: reads never write, appends go to the writer.

    strongroom audit tail/search/verify/export, admin grant, keys rotate ...
        reads  --> a read-only view of the store (SQLite ``mode=ro``): no checkpoint, no delete
        writes --> the gateway that owns the log, through its ``WriterSocket``
                   or, when no gateway runs, a short-lived writer of our own: it takes the
                   writer lock, recovers the log if the last writer died, appends, and closes
                   with a final checkpoint

With PostgreSQL every process may append (the database orders them), so appends go straight
to a writer of our own. A command that only reads leaves the log exactly as it found it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import msgspec

from audit.archive import ArchiveReport, verify_archives
from audit.bundle import export_bundle, export_csv
from audit.config import AuditConfig
from audit.errors import AuditQueryError, AuditWriterBusyError
from audit.export_progress import Progress
from audit.log import AuditLog
from audit.query import AuditPage, AuditQuery, decode_cursor, encode_cursor
from audit.record import AuditRecord, record_from_row
from audit.signer import CheckpointSigner
from audit.sqlite_store import SqliteStore
from audit.store import ArchiveEntry, AuditStore, open_store
from audit.trusted_key import TrustedKey, trusted_key
from audit.verification import verify_log
from audit.verifier import VerifyReport
from audit.witness import open_witness
from audit.writer_socket import WriterRequest, ask_writer
from common.audit_event import AuditEvent

__all__ = ["OperatorLog"]

_BUSY_RETRY_S = 10.0
"""How long an append keeps trying while a gateway holds the lock but its socket is not up yet
(it is starting, or stopping)."""


class OperatorLog:
    """Satisfies ``AuditSink``. Open one per command and ``close`` it."""

    def __init__(self, cfg: AuditConfig, data_dir: Path, *, may_create_key: bool = False) -> None:
        """``may_create_key``: ``public-key`` before the first start makes the key as a start would."""
        self._cfg = cfg
        self._may_create_key = may_create_key
        self._data_dir = data_dir
        self._db_path = cfg.resolve(data_dir, cfg.sqlite_path)
        self._store: AuditStore | None = None
        self._writer: AuditLog | None = None
        self._signer: CheckpointSigner | None = None

    def __repr__(self) -> str:
        return f"OperatorLog(backend={self._cfg.backend!r}, writer={'own' if self._writer else 'gateway'})"

    @property
    def _is_sqlite(self) -> bool:
        return self._cfg.backend == "sqlite"

    # -- writes ----------------------------------------------------------------------------

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        """Durably record ``event``: through the gateway when one owns the log, else ourselves."""
        deadline = time.monotonic() + _BUSY_RETRY_S
        while self._writer is None and self._is_sqlite:
            reply = await ask_writer(self._db_path, WriterRequest(op="append", event=event))
            if reply is not None:
                return reply.seq
            try:
                await self._own_writer()
            except AuditWriterBusyError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        writer = await self._own_writer()
        return await writer.append(event, served=served)

    async def archive(self) -> ArchiveEntry | None:
        """Move old records into a sealed segment (the gateway does it when it owns the log)."""
        if self._writer is None and self._is_sqlite:
            reply = await ask_writer(self._db_path, WriterRequest(op="archive"))
            if reply is not None:
                return None if reply.archived is None else ArchiveEntry(*reply.archived)
        writer = await self._own_writer()
        return await writer.archive(self._data_dir)

    async def _own_writer(self) -> AuditLog:
        if self._writer is None:
            self._writer = await AuditLog.open(
                # No waiting for the lock: a gateway that holds it is asked through its socket.
                msgspec.structs.replace(self._cfg, writer_lock_wait_s=0.0),
                self._data_dir,
                heartbeat=False,
                record_lifecycle=False,
                final_on_close=self._is_sqlite,  # the only writer while it holds the lock
            )
        return self._writer

    # -- reads -----------------------------------------------------------------------------

    async def _read_store(self) -> AuditStore:
        if self._store is None:
            store = (
                SqliteStore.read_only(self._db_path)
                if self._is_sqlite
                else open_store(self._cfg, self._data_dir)
            )
            await asyncio.to_thread(store.open, uuid.uuid4().hex)
            self._store = store
        return self._store

    @property
    def signer(self) -> CheckpointSigner:
        """The checkpoint-signing key (created here only with ``may_create_key``)."""
        if self._signer is None:
            cfg = (
                self._cfg
                if self._may_create_key
                else msgspec.structs.replace(self._cfg, create_signing_key=False)
            )
            self._signer = CheckpointSigner.open(cfg, self._data_dir)
        return self._signer

    async def tail(self, n: int) -> list[AuditRecord]:
        store = await self._read_store()
        return [record_from_row(row) for row in await asyncio.to_thread(store.tail, n)]

    async def search(self, query: AuditQuery) -> AuditPage:
        store = await self._read_store()
        after = decode_cursor(query.cursor)
        rows = await asyncio.to_thread(store.search, query, after, query.limit + 1)
        records = [record_from_row(row) for row in rows[: query.limit]]
        next_cursor = encode_cursor(records[-1].seq) if len(rows) > query.limit else None
        return AuditPage(records=records, next_cursor=next_cursor)

    def trusted(self, public_key_path: Path | None = None) -> TrustedKey:
        """The pinned key (``--public-key`` over the configuration), else the log's own, unpinned."""
        return trusted_key(self._cfg, self._data_dir, self.signer.verifier, public_key_path=public_key_path)

    async def verify(self, public_key_path: Path | None = None) -> VerifyReport:
        """Archives, online records, checkpoints and witnesses against the trusted key."""
        store = await self._read_store()
        self.trusted().require_signer(self.signer.key_id)  # the configured pin, as a writer checks it
        trusted = self.trusted(public_key_path)
        witness = open_witness(self._cfg, self._data_dir, self.signer)
        try:
            return await asyncio.to_thread(verify_log, store, trusted, witness)
        finally:
            if witness is not None:
                await asyncio.to_thread(witness.close)

    async def verify_archives(self) -> ArchiveReport:
        store = await self._read_store()
        return await asyncio.to_thread(verify_archives, store, self.trusted().verifier)

    async def export(
        self, path: Path, *, fmt: str, first_seq: int, last_seq: int | None, progress: Progress | None = None
    ) -> int:
        """Export what is committed now; a JSONL bundle's seal signs the exact range it holds.

        ``progress`` is told (records written, records in the range) from the export's thread."""
        store = await self._read_store()
        head = await asyncio.to_thread(store.head)
        last = head.seq if last_seq is None else min(last_seq, head.seq)
        first = max(first_seq, 1)
        if fmt == "csv":
            return await asyncio.to_thread(
                export_csv, store, path, first_seq=first, last_seq=last, progress=progress
            )
        if fmt != "jsonl":
            raise AuditQueryError("export format must be jsonl or csv")
        now_us = int(time.time() * 1_000_000)
        seal = await asyncio.to_thread(
            export_bundle,
            store,
            self.signer,
            path,
            first_seq=first,
            last_seq=last,
            now_us=now_us,
            progress=progress,
        )
        return seal.num_records

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer.close()
            self._writer = None
        if self._store is not None:
            await asyncio.to_thread(self._store.close)
            self._store = None
