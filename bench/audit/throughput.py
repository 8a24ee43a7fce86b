"""Audit log throughput and added latency per append (group commit, SQLite WAL synchronous=FULL).

    .venv/bin/python bench/audit/throughput.py [--backend sqlite|postgres] [--records 50000]
        [--stages] [--gc on|freeze|off] [--out PATH]
    .venv/bin/python bench/audit/throughput.py --disk-floor [--dir DIR]
    .venv/bin/python bench/audit/throughput.py --backend postgres --writers 2 [--records 20000]

1. sustained: ``--concurrency`` closed-loop appenders for ``--records`` records -> records/s.
2. latency: open-loop arrivals at each ``--rates`` value (requests/s) for ``--seconds`` each,
   every arrival one append; p50/p99 of the time append() takes (the latency the gateway adds).
   Garbage-collector pauses during each run are counted (``gc_*``).
3. ``--stages``: where each append's time goes, from the log's ``on_batch`` stamps and a timed
   store (``StageProfile``): the fastest half against the slowest 1 %. It adds a trace callback
   per SQL statement, so headline numbers come from runs without it.
4. ``--disk-floor``: no SQLite, only the disk under ``--dir``: p50-p99.9 of a small write made
   durable (in place + fdatasync, append + fdatasync / fsync, O_DSYNC): the floor under any commit.
5. ``--writers N`` (postgres): N writer processes on one schema, as N gateways would append to
   one chain, against one writer alone in the same run (``audit_writers.py``).
Every latency phase reports the CPU the rest of the machine used meanwhile (``other_cpu_cores``,
``steal_cores``): on a shared 2-core VM that decides whether a run is comparable.
Writes bench/results/audit_throughput[_postgres|_disk_floor].json (or ``--out``) with command,
commit, machine, load average and date.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from audit.checkpoint import Checkpoint
from audit.config import AuditConfig
from audit.group_commit import BatchTiming
from audit.log import AuditLog
from audit.postgres_store import PostgresStore
from audit.record import RecordRow
from audit.sqlite_store import SqliteStore
from audit.store import AuditStore, SealBatch, StoreHead
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding

COMMIT = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
IS_DIRTY = bool(
    subprocess.run(
        ["git", "status", "--porcelain", "--", "audit", "bench"], capture_output=True, text=True
    ).stdout.strip()
)


def _event(i: int) -> AuditEvent:
    return AuditEvent(
        event_type=EventType.INFERENCE,
        decision=Decision.ALLOW,
        request_id=f"req-{i}",
        trace_id=uuid.uuid4().hex,
        subject=f"user{i % 100}",
        roles=("analyst",),
        tenant="retail",
        client_ip="10.0.0.7",
        client_app="teller-app",
        model="qwen-7b",
        model_manifest="sha256:" + "ab" * 32,
        endpoint="/v1/chat/completions",
        status=200,
        findings=(Finding(type="pii.card", count=1, action="mask"),) if i % 10 == 0 else (),
        prompt_tokens=120,
        completion_tokens=80,
        latency_ms=42.125,
        engine_instance="engine-0",
    )


class StageProfile:
    """Per-append stages: bench stamps, the log's ``BatchTiming`` and the store's, joined on seq.

    to_writer  call -> writer took the batch (caller-side encoding, queue, thread wake-up);
               ``behind_commit`` is the part spent waiting for the previous batch's commit
    seal       chain, hash and (when due) sign the checkpoint, on the writer thread
    insert     BEGIN .. COMMIT issued (SQLite; PostgreSQL reports insert+commit as ``store``)
    commit     COMMIT: WAL write and fdatasync
    to_loop    durable -> the event loop runs the batch's callback
    wake       futures resolved -> the awaiting append returns
    behind_housekeeping  the part of to_writer spent while the writer ran the store's ``idle``
               housekeeping (a WAL rewind) that had work to do

    Housekeeping is counted as well: ``idle`` calls that did work (a rewind was due) and
    ``maintain`` passes (WAL copies on the maintenance thread), with their durations, and the
    appends that waited behind the one or overlapped the other.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.batches: list[BatchTiming] = []
        self.store: dict[int, tuple[float, float | None, float]] = {}
        self.appends: list[tuple[int, float, float]] = []
        self.idle_calls = 0
        self.idle_work: list[tuple[float, float]] = []
        self.maintain_work: list[tuple[float, float]] = []

    def note_batch(self, timing: BatchTiming) -> None:
        if timing.num_records:
            self.batches.append(timing)

    def note_store(self, first_seq: int, begin: float, commit_started: float | None, end: float) -> None:
        self.store[first_seq] = (begin, commit_started, end)

    def note_housekeeping(self, kind: str, start: float, end: float) -> None:
        """``kind``: "idle" (on the writer, only when it had work) or "maintain"."""
        (self.idle_work if kind == "idle" else self.maintain_work).append((start, end))

    def note_append(self, seq: int, t0: float, t1: float) -> None:
        self.appends.append((seq, t0, t1))

    def _stages(self, seq: int, t0: float, t1: float, firsts: list[int]) -> dict[str, float] | None:
        i = bisect.bisect_right(firsts, seq) - 1
        if i < 0 or (batch := self.batches[i]).first_seq not in self.store:
            return None
        begin, commit_started, end = self.store[batch.first_seq]
        previous_end = self.batches[i - 1].committed_at if i > 0 else t0
        out = {
            "total": t1 - t0,
            "to_writer": batch.taken_at - t0,
            "behind_commit": max(0.0, min(previous_end, batch.taken_at) - t0),
            "seal": begin - batch.taken_at,
            "behind_housekeeping": sum(
                max(0.0, min(end, batch.taken_at) - max(start, t0)) for start, end in self.idle_work
            ),
        }
        if commit_started is None:
            out["store"] = end - begin
        else:
            out["insert"], out["commit"] = commit_started - begin, end - commit_started
        out["to_loop"] = batch.resolved_at - batch.committed_at
        out["wake"] = t1 - batch.resolved_at
        return out

    def report(self) -> dict[str, object]:
        self.batches.sort(key=lambda b: b.first_seq)
        firsts = [b.first_seq for b in self.batches]
        rows = [r for a in self.appends if (r := self._stages(*a, firsts)) is not None]
        rows.sort(key=lambda r: r["total"])
        slowest = rows[-max(1, len(rows) // 100) :]

        def mean_ms(sel: Sequence[dict[str, float]]) -> dict[str, float]:
            return {k: round(statistics.fmean(r[k] for r in sel) * 1e3, 3) for k in sel[0]}

        commits = sorted(end - begin for begin, _, end in self.store.values())

        def durations(work: list[tuple[float, float]]) -> dict[str, float]:
            spans = [end - start for start, end in work]
            return {"num": len(spans), "total_ms": round(sum(spans) * 1e3, 3)}

        return {
            "num_appends": len(rows),
            "num_batches": len(self.batches),
            "mean_batch": statistics.fmean(b.num_records for b in self.batches),
            "idle_calls": self.idle_calls,
            "idle_with_work": durations(self.idle_work),
            "maintain": durations(self.maintain_work),
            "appends_behind_housekeeping": sum(r["behind_housekeeping"] > 0 for r in rows),
            "appends_during_maintain": sum(
                any(start < t1 and t0 < end for start, end in self.maintain_work)
                for _, t0, t1 in self.appends
            ),
            "mean_ms": mean_ms(rows),
            "fastest_half_mean_ms": mean_ms(rows[: len(rows) // 2]),
            "slowest_1pct_mean_ms": mean_ms(slowest),
            "store_append_ms": {
                "p50": commits[len(commits) // 2] * 1e3,
                "p99": commits[int(len(commits) * 0.99) - 1] * 1e3,
                "max": commits[-1] * 1e3,
            },
        }


class TimedSqliteStore(SqliteStore):
    """Stamps each append, and when COMMIT starts (a trace callback on the writer's connection)."""

    def __init__(self, path: Path, profile: StageProfile) -> None:
        super().__init__(path)
        self._profile = profile
        self._commit_started = 0.0
        self._is_traced = False

    def append(self, rows: Sequence[RecordRow], checkpoint: Checkpoint | None) -> None:
        if not self._is_traced:  # first call, on the writer thread: its own connection
            self._conn().set_trace_callback(self._trace)
            self._is_traced = True
        begin = time.perf_counter()
        super().append(rows, checkpoint)
        if rows:
            self._profile.note_store(rows[0].seq, begin, self._commit_started, time.perf_counter())

    def idle(self) -> None:
        self._profile.idle_calls += 1
        if self._rewind_due_since is None:
            super().idle()
            return
        start = time.perf_counter()
        super().idle()
        self._profile.note_housekeeping("idle", start, time.perf_counter())

    def maintain(self) -> None:
        start = time.perf_counter()
        super().maintain()
        self._profile.note_housekeeping("maintain", start, time.perf_counter())

    def _trace(self, statement: str) -> None:
        if statement == "COMMIT":
            self._commit_started = time.perf_counter()


class TimedPostgresStore(PostgresStore):
    def __init__(self, dsn: str, schema: str, profile: StageProfile) -> None:
        super().__init__(dsn, schema)
        self._profile = profile

    def append_at_head(self, seal: SealBatch) -> None:
        """The chain writer's path on PostgreSQL (lock, head, insert, commit), timed as one store call."""
        begin = time.perf_counter()
        first_seqs: list[int] = []

        def timed_seal(head: StoreHead) -> tuple[Sequence[RecordRow], Checkpoint | None]:
            rows, checkpoint = seal(head)
            first_seqs.extend(row.seq for row in rows[:1])
            return rows, checkpoint

        super().append_at_head(timed_seal)
        if first_seqs:
            self._profile.note_store(first_seqs[0], begin, None, time.perf_counter())


async def sustained(log: AuditLog, num_records: int, concurrency: int) -> float:
    counter = iter(range(num_records))

    async def worker() -> None:
        for i in counter:
            await log.append(_event(i))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return num_records / (time.perf_counter() - start)


class CpuShare:
    """CPU the rest of the machine used while active (from /proc/stat, Linux): a run measured while
    another process held a core is not comparable, so every latency phase reports it."""

    def __init__(self) -> None:
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, list[int] | None, float]:
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:9]]
        except OSError:
            ticks = None
        own = os.times()
        return time.monotonic(), ticks, own.user + own.system

    def summary(self) -> dict[str, float | None]:
        (t0, ticks0, own0), (t1, ticks1, own1) = self._start, self._sample()
        if ticks0 is None or ticks1 is None:
            return {"other_cpu_cores": None, "steal_cores": None, "iowait_cores": None}
        hz = os.sysconf("SC_CLK_TCK")
        delta = [(b - a) / hz for a, b in zip(ticks0, ticks1, strict=True)]
        user, nice, system, _idle, iowait, irq, softirq, steal = delta
        busy = user + nice + system + irq + softirq
        elapsed = t1 - t0
        return {
            "other_cpu_cores": round(max(0.0, busy - (own1 - own0)) / elapsed, 3),
            "steal_cores": round(steal / elapsed, 3),
            "iowait_cores": round(iowait / elapsed, 3),
        }


class GcPauses:
    """Collector pauses (any thread) while active: count, total, longest, and full (gen 2) ones."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self) -> dict[str, float]:
        full = [p for g, p in self.pauses if g == 2]
        return {
            "gc_num": len(self.pauses),
            "gc_total_ms": sum(p for _, p in self.pauses) * 1e3,
            "gc_max_ms": max((p for _, p in self.pauses), default=0.0) * 1e3,
            "gc_gen2_num": len(full),
            "gc_gen2_max_ms": max(full, default=0.0) * 1e3,
        }


async def latency_at(
    log: AuditLog, rate: float, seconds: float, profile: StageProfile | None
) -> dict[str, object]:
    latencies: list[float] = []
    pauses = GcPauses()
    cpu = CpuShare()

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        seq = await log.append(_event(i))
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        if profile is not None:
            profile.note_append(seq, t0, t1)

    if profile is not None:
        profile.reset()

    # Only appends in flight are referenced, as in a server: keeping every finished task until
    # the end (as runs before 2026-12-02 23:30 did) grows the heap the collector walks.
    in_flight: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    while in_flight:
        await asyncio.gather(*in_flight)
    gc.callbacks.remove(pauses._callback)
    latencies.sort()
    result: dict[str, object] = {
        "rate_per_s": rate,
        "num": len(latencies),
        "achieved_per_s": len(latencies) / (time.perf_counter() - start),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        "max_ms": latencies[-1] * 1e3,
        **pauses.summary(),
        **cpu.summary(),
    }
    if profile is not None:
        result["stages"] = profile.report()
    return result


_FLOOR_REGION = 64 << 20
_FLOOR_MODES = ("overwrite_fdatasync", "append_fdatasync", "append_fsync", "overwrite_odsync")


def _floor_file(directory: Path, mode: str) -> tuple[Path, int]:
    """A file for one raw-disk mode: preallocated (zeros written and fsynced) unless it appends."""
    path = directory / f"disk-floor-{mode}.bin"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if mode.startswith("overwrite"):
            chunk = bytes(1 << 20)
            for offset in range(0, _FLOOR_REGION, len(chunk)):
                os.pwrite(fd, chunk, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path, os.O_RDWR | (os.O_DSYNC if mode.endswith("odsync") else 0)


def _floor_phase(path: Path, flags: int, mode: str, size: int, num: int, rate: float) -> list[float]:
    """``num`` writes of ``size`` bytes paced at ``rate``/s, each made durable as ``mode`` says."""
    if mode.startswith("append"):
        os.truncate(path, 0)
    fd = os.open(path, flags)
    buf = os.urandom(size)
    sync = {"fdatasync": os.fdatasync, "fsync": os.fsync}.get(mode.rsplit("_", 1)[1])
    latencies, offset = [], 0
    try:
        start = time.perf_counter()
        for i in range(num):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            os.pwrite(fd, buf, offset)
            if sync is not None:
                sync(fd)
            latencies.append(time.perf_counter() - t0)
            offset += size
            if mode.startswith("overwrite") and offset + size > _FLOOR_REGION:
                offset = 0
    finally:
        os.close(fd)
    return latencies


def disk_floor(args: argparse.Namespace) -> dict[str, object]:
    """The raw cost of "durable before the answer" on the disk under ``--dir``, without SQLite.

    Each mode writes ``size`` bytes at ``--floor-rate``/s and waits until durable: overwriting a
    preallocated file in place + fdatasync (what a commit costs once the WAL is allocated),
    appending + fdatasync or + fsync (a growing file: the new size is journaled), and O_DSYNC
    writes in place. Modes alternate in phases of ``--floor-writes`` so that a noisy minute
    spreads over all of them. 20,600 bytes is a single-record commit (5 WAL frames of 4,120).
    """
    directory = Path(tempfile.mkdtemp(prefix="audit-disk-floor-", dir=args.dir))
    sizes = [int(x) for x in args.floor_sizes.split(",")]
    files = {mode: _floor_file(directory, mode) for mode in _FLOOR_MODES}
    samples: dict[tuple[str, int], list[float]] = {(m, z): [] for m in _FLOOR_MODES for z in sizes}
    load_before = os.getloadavg()
    cpu = CpuShare()
    try:
        for _ in range(args.floor_cycles):
            for size in sizes:
                for mode in _FLOOR_MODES:
                    path, flags = files[mode]
                    samples[mode, size] += _floor_phase(
                        path, flags, mode, size, args.floor_writes, args.floor_rate
                    )
    finally:
        for path, _ in files.values():
            path.unlink(missing_ok=True)
        directory.rmdir()

    def quantile(values: list[float], q: float) -> float:
        return round(values[min(len(values) - 1, int(len(values) * q))] * 1e3, 3)

    rows = []
    for (mode, size), values in samples.items():
        values.sort()
        rows.append(
            {"mode": mode, "bytes": size, "num": len(values)}
            | {f"p{q * 100:g}_ms": quantile(values, q) for q in (0.5, 0.9, 0.99, 0.995, 0.999)}
            | {"max_ms": round(values[-1] * 1e3, 3)}
        )
    return {
        "benchmark": "audit_throughput disk floor",
        "rate_per_s": args.floor_rate,
        "writes_per_phase": args.floor_writes,
        "cycles": args.floor_cycles,
        "results": rows,
        **cpu.summary(),
        "filesystem": _filesystem(directory.parent),
        **_provenance(load_before, directory.parent),
    }


def _filesystem(path: Path) -> str:
    """The mount holding ``path`` (device, mount point, type, options), from /proc/self/mounts."""
    target = path.resolve()
    best = (-1, "unknown")
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            device, mount, fstype, options, *_ = line.split()
            if target.is_relative_to(mount) and len(mount) > best[0]:
                best = (len(mount), f"{device} on {mount} ({fstype}, {options})")
    return best[1]


def _provenance(load_before: tuple[float, float, float], storage: Path) -> dict[str, object]:
    return {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "commit": COMMIT,
        "tree": "working tree (uncommitted changes under audit/ or bench/)" if IS_DIRTY else "clean",
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "storage_dir": str(storage),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
    load_before = os.getloadavg()
    profile = StageProfile() if args.stages else None
    schema = f"audit_bench_{uuid.uuid4().hex[:8]}"
    store: AuditStore | None = None
    if args.backend == "postgres":
        store = (
            PostgresStore(args.dsn, schema)
            if profile is None
            else TimedPostgresStore(args.dsn, schema, profile)
        )
    elif profile is not None:
        store = TimedSqliteStore(data_dir / "audit" / "audit.db", profile)
    log = await AuditLog.open(
        AuditConfig(), data_dir, store=store, on_batch=None if profile is None else profile.note_batch
    )
    wal = data_dir / "audit" / "audit.db-wal"
    try:
        await sustained(log, 2000, args.concurrency)  # warm-up
        rps = await sustained(log, args.records, args.concurrency)
        if args.gc == "freeze":
            gc.collect()
            gc.freeze()
        elif args.gc == "off":
            gc.disable()
        rates = [await latency_at(log, float(r), args.seconds, profile) for r in args.rates.split(",")]
        gc.enable()
        wal_bytes = wal.stat().st_size if wal.exists() else None
        report = await log.verify()
    finally:
        await log.close()
    return {
        "benchmark": "audit_throughput",
        "backend": args.backend,
        "durability": "sqlite WAL synchronous=FULL"
        if args.backend == "sqlite"
        else "postgres synchronous_commit=on",
        "sustained_records_per_s": round(rps),
        "concurrency": args.concurrency,
        "records": args.records,
        "latency": rates,
        "gc": args.gc,
        "wal_bytes_at_end": wal_bytes,
        "verified_records": report.num_records,
        "verify_ok": report.ok,
        **_provenance(load_before, data_dir.parent),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--dsn", default="host=127.0.0.1 user=postgres dbname=test")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=None, help="where the temporary data dir goes (default: $TMPDIR)")
    parser.add_argument("--stages", action="store_true", help="profile where each append's time goes")
    parser.add_argument(
        "--gc", choices=["on", "freeze", "off"], default="on", help="collector during the latency runs"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: bench/results/...)")
    parser.add_argument(
        "--disk-floor",
        action="store_true",
        help="only measure the raw write + sync cost of the disk under --dir",
    )
    parser.add_argument("--floor-rate", type=float, default=1000.0, help="writes/s in --disk-floor")
    parser.add_argument(
        "--floor-writes", type=int, default=5000, help="writes per mode and phase in --disk-floor"
    )
    parser.add_argument("--floor-cycles", type=int, default=3, help="phases per mode in --disk-floor")
    parser.add_argument("--floor-sizes", default="4096,20600", help="bytes per write in --disk-floor")
    parser.add_argument("--writers", type=int, default=0, help="postgres: writer processes on one schema")
    args = parser.parse_args()
    if args.writers:
        from bench.audit.writers import shared_writers

        load_before = os.getloadavg()
        data_dir = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
        shared = shared_writers(args.dsn, data_dir, args.writers, args.records, args.concurrency)
        result = {
            "benchmark": "audit_throughput_shared_writers",
            **shared,
            **_provenance(load_before, data_dir),
        }
        out = (
            args.out
            or Path(__file__).resolve().parents[1] / "results" / "audit_throughput_postgres_writers.json"
        )
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        sys.exit(0)
    if args.disk_floor:
        floor = disk_floor(args)
        out = args.out or Path(__file__).resolve().parents[1] / "results" / "audit_throughput_disk_floor.json"
        out.write_text(json.dumps(floor, indent=2) + "\n")
        print(json.dumps(floor, indent=2))
        sys.exit(0)
    result = asyncio.run(main(args))
    suffix = "" if result["backend"] == "sqlite" else "_postgres"
    out = args.out or Path(__file__).resolve().parents[1] / "results" / f"audit_throughput{suffix}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
