"""The audit log: durable, chained, signed, fail-closed appends with group commit.

    append(): encode_event (canonical JSON, on the caller) --> GroupCommit (writer thread)
              --> ChainWriter.commit, one transaction and fsync per batch --> seq returned

``append`` returns only after the transaction holding its record committed (SQLite WAL with
synchronous=FULL fsyncs; PostgreSQL with synchronous_commit on). If the store fails, every
append in the batch raises ``AuditUnavailableError``; once the store is back the first batch
starts with an ``audit_outage`` record counting what was refused. Checkpoints are signed in
the same transaction as the batch that makes them due, and on a timer when idle.

A gateway worker holds a log opened with ``join``: the same reads, and the same ``append``,
whose records go to the supervisor's log through ``audit.feed`` (one writer for all workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

import msgspec

from audit.aggregates import AuditAggregates, aggregate
from audit.archive import ArchiveReport, archive_older_than, online_cutoff_us, verify_archives
from audit.bundle import export_bundle, export_csv
from audit.chain_writer import ChainWriter, Entry
from audit.config import AuditConfig
from audit.content_guard import ContentGuard, ContentKeyProvider, FileContentKeys
from audit.errors import (
    AuditConfigError,
    AuditError,
    AuditNotFoundError,
    AuditQueryError,
    AuditUnavailableError,
)
from audit.event_bounds import bounded_event
from audit.feed import AuditFeed
from audit.group_commit import BatchTiming, GroupCommit
from audit.query import MAX_LIMIT, AuditPage, AuditQuery, decode_cursor, encode_cursor
from audit.record import AuditContent, AuditRecord, encode_event, record_from_row
from audit.recovery import recover
from audit.signer import CheckpointSigner
from audit.store import ArchiveEntry, AuditStore, open_store
from audit.trusted_key import TrustedKey, trusted_key
from audit.verification import verify_log
from audit.verifier import VerifyReport
from audit.witness import Witness, open_witness
from common.audit_event import AuditEvent, Decision, EventType
from common.audit_sink import AuditSink

_log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


class AuditLog:
    """Satisfies ``AuditSink``; also the read side used by the /audit routes and the CLI."""

    def __init__(
        self,
        cfg: AuditConfig,
        store: AuditStore,
        signer: CheckpointSigner,
        guard: ContentGuard,
        writer: ChainWriter | None,
        read_pool: ThreadPoolExecutor,
        *,
        log_id: str,
        feed: AuditFeed | None = None,
        data_dir: Path | None = None,
        clock: Callable[[], float],
        second_sink: AuditSink | None,
        heartbeat: bool,
        record_lifecycle: bool,
        final_on_close: bool,
        on_batch: Callable[[BatchTiming], None] | None,
        trusted: TrustedKey,
        witness: Witness | None,
    ) -> None:
        self.config = cfg
        self.signer = signer
        self.trusted = trusted
        """The key ``verify`` checks signatures with (pinned, or this log's own: see ``trusted_key``)."""
        self.witness = witness
        self.guard = guard
        self._store = store
        self._writer = writer
        self._read_pool = read_pool
        self._clock = clock
        self._second_sink = second_sink
        self._record_lifecycle = record_lifecycle
        self._is_closing = False
        self._maintaining: Future[None] | None = None
        self._maintenance_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-maintenance")
        self._telling_second_sink: asyncio.Task[None] | None = None
        self._log_id = log_id
        self._feed = feed
        self._data_dir = data_dir
        """Set when fed (``join``): where a verify finds the witness to read."""
        self._group: GroupCommit | AuditFeed
        if feed is not None:
            self._group = feed
        else:
            assert writer is not None
            self._group = GroupCommit(
                cfg,
                writer,
                heartbeat=heartbeat,
                final_on_close=final_on_close,
                on_checkpoint=self._maintenance,
                on_failure=self._on_failure,
                on_batch=on_batch,
            )

    def __repr__(self) -> str:
        return f"AuditLog(store={self._store!r}, key_id={self.signer.key_id!r})"

    @classmethod
    async def open(
        cls,
        cfg: AuditConfig,
        data_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        store: AuditStore | None = None,
        content_keys: ContentKeyProvider | None = None,
        second_sink: AuditSink | None = None,
        heartbeat: bool = True,
        record_lifecycle: bool = True,
        final_on_close: bool | None = None,
        on_batch: Callable[[BatchTiming], None] | None = None,
        check_witness: bool = True,
    ) -> AuditLog:
        """Open (creating if needed) the log. The CLI passes heartbeat/record_lifecycle False.

        ``final_on_close`` (default: ``record_lifecycle``): the last checkpoint says the writer
        stopped cleanly; only a sole writer may say so. Closing writes a checkpoint only when
        something was appended since the last one. ``on_batch`` sees the timing of every group
        commit, on the event loop (metrics, benchmarks). Refuses a signing key that is not the
        pinned one, and (unless ``check_witness`` is False, as for ``audit verify``, which reports
        it instead) a store behind its witness. After an unclean stop the records since the newest
        signed checkpoint are verified first (``recovery``), and the recovery recorded.
        """
        signer = CheckpointSigner.open(cfg, data_dir)
        trusted = trusted_key(cfg, data_dir, signer.verifier)
        trusted.require_signer(signer.key_id)
        witness = open_witness(cfg, data_dir, signer)
        store = store if store is not None else open_store(cfg, data_dir)
        keys = content_keys or FileContentKeys(
            cfg.resolve(data_dir, cfg.content_hmac_key_file), cfg.resolve(data_dir, cfg.content_key_file)
        )
        if second_sink is None and cfg.second_sink_path is not None:
            from audit.file_sink import FileSink

            second_sink = FileSink(cfg.resolve(data_dir, cfg.second_sink_path))
        read_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-reader")
        loop = asyncio.get_running_loop()
        try:
            head = await loop.run_in_executor(read_pool, store.open, uuid.uuid4().hex)
        except AuditError:  # e.g. another writer holds the lock: its own type, for the caller to tell
            read_pool.shutdown()
            raise
        except Exception as exc:
            read_pool.shutdown()
            raise AuditUnavailableError(f"cannot open the audit store: {exc}") from exc
        witness_note = ""
        try:
            if head.checkpoint is not None and head.checkpoint.key_id != signer.key_id:
                raise AuditConfigError(
                    f"audit log is signed by key {head.checkpoint.key_id}, configured key is {signer.key_id}"
                )
            if witness is not None and check_witness:
                witness_note = await loop.run_in_executor(
                    read_pool, witness.check_store, store, signer.verifier
                )
            recovered = await loop.run_in_executor(read_pool, recover, store, signer.verifier, head)
        except BaseException:
            read_pool.shutdown()
            await asyncio.to_thread(store.close)  # releases the writer lock
            if witness is not None:
                await asyncio.to_thread(witness.close)
            raise
        guard = ContentGuard(cfg, keys)
        writer = ChainWriter(cfg, store, signer, guard, head, clock, witness)
        log = cls(
            cfg,
            store,
            signer,
            guard,
            writer,
            read_pool,
            log_id=head.log_id,
            clock=clock,
            second_sink=second_sink,
            heartbeat=heartbeat,
            record_lifecycle=record_lifecycle,
            final_on_close=record_lifecycle if final_on_close is None else final_on_close,
            on_batch=on_batch,
            trusted=trusted,
            witness=witness,
        )
        if recovered is not None:
            await log.append(recovered)
        if record_lifecycle:
            await log.append(
                AuditEvent(event_type=EventType.SERVICE_START, decision=Decision.ALLOW, detail=witness_note)
            )
        return log

    @classmethod
    async def join(cls, cfg: AuditConfig, data_dir: Path, feed_path: Path) -> AuditLog:
        """The log as a gateway worker holds it: reads from the store (read-only for SQLite),
        appends, checkpoints and archiving through the owner's ``AuditFeedServer`` at ``feed_path``.

        The owner recovered the log, checked the witness and records the service's start and
        stop; a worker only checks that its signing key is the pinned one.
        """
        from audit.sqlite_store import SqliteStore

        signer = CheckpointSigner.open(msgspec.structs.replace(cfg, create_signing_key=False), data_dir)
        trusted = trusted_key(cfg, data_dir, signer.verifier)
        trusted.require_signer(signer.key_id)
        if cfg.backend == "sqlite":
            store: AuditStore = SqliteStore.read_only(cfg.resolve(data_dir, cfg.sqlite_path))
        else:
            store = open_store(cfg, data_dir)
        read_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-reader")
        loop = asyncio.get_running_loop()
        try:
            head = await loop.run_in_executor(read_pool, store.open, uuid.uuid4().hex)
            # Past the owner's own deadlines (append_timeout_s queued, twice that in a commit).
            feed = await AuditFeed.connect(feed_path, timeout_s=2 * cfg.append_timeout_s + 1.0)
        except BaseException:
            read_pool.shutdown()
            await asyncio.to_thread(store.close)
            raise
        keys = FileContentKeys(
            cfg.resolve(data_dir, cfg.content_hmac_key_file), cfg.resolve(data_dir, cfg.content_key_file)
        )
        return cls(
            cfg,
            store,
            signer,
            ContentGuard(cfg, keys),
            None,
            read_pool,
            log_id=head.log_id,
            feed=feed,
            data_dir=data_dir,
            clock=time.time,
            second_sink=None,
            heartbeat=False,
            record_lifecycle=False,
            final_on_close=False,
            on_batch=None,
            trusted=trusted,
            witness=None,
        )

    @property
    def log_id(self) -> str:
        return self._log_id

    async def append(
        self, event: AuditEvent, content: AuditContent | None = None, *, served: bool = False
    ) -> int:
        """Record ``event`` (and content, kept as the policy says); returns its sequence number once durable.

        ``served``: the client already has its answer (a stream's final record), so a refusal
        here cuts that stream short rather than answering 503; the outage record counts it apart.
        """
        if self._is_closing:
            raise AuditUnavailableError("audit log is closed")
        try:
            encoded = encode_event(bounded_event(event), int(self._clock() * 1_000_000))
        except (TypeError, ValueError) as exc:  # e.g. a NaN: refuse this append, not its whole batch
            _log.error("audit event cannot be encoded: %s", type(exc).__name__)
            raise AuditUnavailableError("audit event cannot be encoded") from exc
        return await self._group.append(Entry(encoded, content, served))

    async def append_entry(self, entry: Entry) -> int:
        """Append an entry a worker encoded (``AuditFeedServer``); its seq once durable."""
        if self._is_closing:
            raise AuditUnavailableError("audit log is closed")
        return await self._group.append(entry)

    async def append_entries(self, entries: list[Entry]) -> list[int | AuditUnavailableError]:
        """``append_entry`` for each entry of a worker's frame (``AuditFeedServer``), queued
        together: per entry, its seq once durable or why not."""
        if self._is_closing:
            return [AuditUnavailableError("audit log is closed")] * len(entries)
        if not isinstance(self._group, GroupCommit):
            raise TypeError("a log fed by another writer cannot take a feed's entries")
        return await self._group.append_many(entries)

    def problem(self) -> str:
        """Why appends would fail now ("" when they should succeed): for readiness probes.

        Cheap enough for every probe: no store round trip, only the writer's last outcome and,
        for SQLite, whether the files on disk are still the ones it writes.
        """
        if self._is_closing:
            return "audit log is closed"
        if self._feed is not None and self._feed.is_failing:
            return self._feed.problem or "the audit writer's last commit failed"
        if self._group.is_failing:
            return "the last audit commit failed"
        check_files = getattr(self._store, "check_files", None)  # SQLite only
        if check_files is not None:
            try:
                check_files()
            except AuditUnavailableError as exc:
                return str(exc)
        return ""

    async def checkpoint(self) -> None:
        """Seal everything appended so far now, witnessed (also used by tests instead of waiting 60 s)."""
        await self._group.barrier()
        if self.witness is not None:
            await asyncio.to_thread(self.witness.flush)

    async def close(self) -> None:
        if self._is_closing:
            return
        if self._record_lifecycle:
            with contextlib.suppress(AuditUnavailableError):
                await self.append(AuditEvent(event_type=EventType.SERVICE_STOP, decision=Decision.ALLOW))
        self._is_closing = True
        await self._group.close()
        if self._telling_second_sink is not None:
            await self._telling_second_sink
        self._read_pool.shutdown()
        await asyncio.to_thread(self._maintenance_pool.shutdown)
        await asyncio.to_thread(self._store.close)
        if self.witness is not None:
            await asyncio.to_thread(self.witness.close)

    def _maintenance(self) -> None:
        """On the writer thread after a checkpoint: store housekeeping goes to the maintenance thread.

        Its own thread: on the reader thread a long read (a verify or export of the whole log)
        would hold back the WAL checkpoints for as long as it runs, and the WAL would grow (commits
        extending the file are the slow ones); and a checkpoint (milliseconds per thousand records)
        would hold up the reads queued behind it.
        """
        if self._maintaining is not None and not self._maintaining.done():
            return
        self._maintaining = self._maintenance_pool.submit(self._store.maintain)
        self._maintaining.add_done_callback(_log_maintenance_failure)

    def _on_failure(self, entries: list[Entry], is_new_outage: bool) -> None:
        """On the event loop after a failed batch: tell the second sink, in order, off the writer."""
        if self._second_sink is None:
            return
        previous = self._telling_second_sink
        self._telling_second_sink = asyncio.create_task(
            self._tell_second_sink(previous, [entry.event for entry in entries], is_new_outage)
        )

    async def _tell_second_sink(
        self, previous: asyncio.Task[None] | None, events: list[AuditEvent], is_new_outage: bool
    ) -> None:
        assert self._second_sink is not None
        if previous is not None:
            await previous
        try:
            if is_new_outage:
                await self._second_sink.append(
                    AuditEvent(
                        event_type=EventType.AUDIT_OUTAGE,
                        decision=Decision.ERROR,
                        reason="primary audit store unavailable; appends refused",
                    )
                )
            for event in events:
                await self._second_sink.append(event)
        except AuditUnavailableError:
            _log.error("second audit sink unavailable too")

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._read_pool, lambda: fn(*args, **kwargs))
        except AuditError:
            raise
        except Exception as exc:
            raise AuditUnavailableError(f"audit store read failed: {type(exc).__name__}: {exc}") from exc

    async def tail(self, n: int) -> list[AuditRecord]:
        rows = await self._read(self._store.tail, n)
        return [record_from_row(row) for row in rows]

    async def get(self, seq: int) -> AuditRecord:
        row = await self._read(self._store.get, seq)
        if row is None:
            raise AuditNotFoundError(f"no audit record {seq}")
        return record_from_row(row)

    async def search(self, query: AuditQuery) -> AuditPage:
        after = decode_cursor(query.cursor)
        rows = await self._read(self._store.search, query, after, query.limit + 1)
        records = [record_from_row(row) for row in rows[: query.limit]]
        next_cursor = encode_cursor(records[-1].seq) if len(rows) > query.limit else None
        return AuditPage(records=records, next_cursor=next_cursor)

    async def read_content(self, seq: int) -> AuditContent:
        """Decrypt a record's content. Callers must hold audit:content and audit the view first."""
        record = await self.get(seq)
        if record.content is None:
            raise AuditNotFoundError(f"audit record {seq} kept no content")
        return self.guard.open(record.content, log_id=self.log_id, seq=seq)

    async def content_matches(self, seq: int, text: str) -> dict[str, bool]:
        """Investigator check against an HMAC-kept record: was ``text`` its prompt or completion?"""
        record = await self.get(seq)
        if record.content is None:
            raise AuditNotFoundError(f"audit record {seq} kept no content")
        return self.guard.matches(record.content, text)

    async def aggregates(self, query: AuditQuery) -> AuditAggregates:
        """Aggregates over every record matching ``query`` (its cursor and limit are ignored)."""

        def scan() -> AuditAggregates:
            after, records = 0, list[AuditRecord]()
            while True:
                rows = self._store.search(query, after, MAX_LIMIT)
                records.extend(record_from_row(row) for row in rows)
                if len(rows) < MAX_LIMIT:
                    return aggregate(records)
                after = rows[-1].seq

        return await self._read(scan)

    async def verify(self, trusted: TrustedKey | None = None) -> VerifyReport:
        """Verify archives, online records and witnesses against ``trusted`` (default: ``self.trusted``)."""
        if self._data_dir is None:
            return await self._read(verify_log, self._store, trusted or self.trusted, self.witness)
        witness = open_witness(self.config, self._data_dir, self.signer)  # to read, as the CLI does
        try:
            return await self._read(verify_log, self._store, trusted or self.trusted, witness)
        finally:
            if witness is not None:
                await asyncio.to_thread(witness.close)

    async def export(
        self, path: Path, *, fmt: str = "jsonl", first_seq: int = 1, last_seq: int | None = None
    ) -> int:
        """Export a contiguous range; returns the number of records. JSONL bundles are sealed."""
        await self.checkpoint()
        head_seq = (await self._read(self._store.head)).seq
        last = head_seq if last_seq is None else min(last_seq, head_seq)
        first = max(first_seq, 1)
        if fmt == "csv":
            return await self._read(export_csv, self._store, path, first_seq=first, last_seq=last)
        if fmt != "jsonl":
            raise AuditQueryError("export format must be jsonl or csv")
        now_us = int(self._clock() * 1_000_000)
        seal = await self._read(
            export_bundle, self._store, self.signer, path, first_seq=first, last_seq=last, now_us=now_us
        )
        return seal.num_records

    async def archive(self, data_dir: Path) -> ArchiveEntry | None:
        """Move records older than ``retention_online_days`` (up to a checkpoint) into a sealed segment."""
        if self._feed is not None:  # the owner archives: only the writer may prune its store
            archived = await self._feed.archive()
            return None if archived is None else ArchiveEntry(*archived)
        await self.checkpoint()
        now_us = int(self._clock() * 1_000_000)
        cutoff = online_cutoff_us(now_us, self.config.retention_online_days)
        target = self.config.resolve(data_dir, self.config.archive_dir)
        return await self._read(
            archive_older_than, self._store, self.signer, target, cutoff_us=cutoff, now_us=now_us
        )

    async def verify_archives(self) -> ArchiveReport:
        return await self._read(verify_archives, self._store, self.trusted.verifier)

    @property
    def store(self) -> AuditStore:
        """For verification, export and archiving; call its methods off the event loop."""
        return self._store

    async def run_reader(self, fn: Callable[[], T]) -> T:
        """Run a blocking read (verification, export) on the reader thread."""
        return await self._read(fn)


def _log_maintenance_failure(future: Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _log.warning("audit store maintenance failed: %s", type(future.exception()).__name__)
