"""Several gateways on one PostgreSQL audit log: writer processes appending to one chain.

``audit_throughput.py --backend postgres --writers 2`` runs it: first one writer process alone
(the peer-less baseline, same run, same schema), then ``--writers`` processes at once, each with
its own ``AuditLog`` (writer thread, connections) and the one shared signing key file, started
together behind a barrier. Throughput is all records over the span from the first writer's start
to the last one's end; afterwards the whole chain is verified (no gap, one checkpoint chain).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path
from typing import Any

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.postgres_store import PostgresStore

__all__ = ["shared_writers"]


def _config(data_dir: Path) -> AuditConfig:
    return AuditConfig(signing_key_file=str(data_dir / "shared-audit-signing-key.pem"))


def _writer(
    dsn: str, schema: str, data_dir: str, records: int, concurrency: int, barrier: Any, out: Any
) -> None:
    from bench.audit.throughput import sustained

    async def run() -> tuple[float, float]:
        log = await AuditLog.open(_config(Path(data_dir)), Path(data_dir), store=PostgresStore(dsn, schema))
        try:
            await sustained(log, 1000, concurrency)  # warm-up: connections, caches
            barrier.wait()
            start = time.time()
            await sustained(log, records, concurrency)
            return start, time.time()
        finally:
            await log.close()

    out.put(asyncio.run(run()))


def _phase(
    dsn: str, schema: str, data_dir: Path, num_writers: int, records: int, concurrency: int
) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(num_writers), ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(dsn, schema, str(data_dir), records, concurrency, barrier, out))
        for _ in range(num_writers)
    ]
    for proc in procs:
        proc.start()
    spans = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"writer process exited with {proc.exitcode}")
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return {
        "writers": num_writers,
        "records": num_writers * records,
        "records_per_s": round(num_writers * records / (end - start)),
        "per_writer_records_per_s": [round(records / (e - s)) for s, e in spans],
    }


async def _verify(dsn: str, schema: str, data_dir: Path) -> dict[str, Any]:
    log = await AuditLog.open(
        _config(data_dir), data_dir, store=PostgresStore(dsn, schema), heartbeat=False, record_lifecycle=False
    )
    try:
        report = await log.verify()
    finally:
        await log.close()
    return {
        "verify_ok": report.ok,
        "verified_records": report.num_records,
        "checkpoints": report.num_checkpoints,
    }


def shared_writers(
    dsn: str, data_dir: Path, num_writers: int, records: int, concurrency: int
) -> dict[str, Any]:
    """The baseline (one writer) and ``num_writers`` at once, on one fresh schema."""
    import uuid

    schema = f"audit_bench_{uuid.uuid4().hex[:8]}"
    baseline = _phase(dsn, schema, data_dir, 1, records, concurrency)
    shared = _phase(dsn, schema, data_dir, num_writers, records, concurrency)
    return {"baseline_one_writer": baseline, "shared": shared, **asyncio.run(_verify(dsn, schema, data_dir))}
