"""Audit log throughput and added latency per append (group commit, SQLite WAL synchronous=FULL).

    .venv/bin/python bench/audit_throughput.py [--backend sqlite|postgres] [--records 50000]

1. sustained: ``--concurrency`` closed-loop appenders for ``--records`` records -> records/s.
2. latency: open-loop arrivals at each ``--rates`` value (requests/s) for ``--seconds`` each,
   every arrival one append; p50/p99 of the time append() takes (the latency the gateway adds).
Writes bench/results/audit_throughput[_postgres].json with command, commit, machine and date.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from audit.config import AuditConfig
from audit.event import AuditEvent, Decision, EventType, Finding
from audit.log import AuditLog
from audit.store import AuditStore

COMMIT = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


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


async def sustained(log: AuditLog, num_records: int, concurrency: int) -> float:
    counter = iter(range(num_records))

    async def worker() -> None:
        for i in counter:
            await log.append(_event(i))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return num_records / (time.perf_counter() - start)


async def latency_at(log: AuditLog, rate: float, seconds: float) -> dict[str, float]:
    latencies: list[float] = []

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        await log.append(_event(i))
        latencies.append(time.perf_counter() - t0)

    tasks = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    latencies.sort()
    return {
        "rate_per_s": rate,
        "num": len(latencies),
        "achieved_per_s": len(latencies) / (time.perf_counter() - start),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        "max_ms": latencies[-1] * 1e3,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
    store: AuditStore | None = None
    if args.backend == "postgres":
        from audit.postgres_store import PostgresStore

        store = PostgresStore(args.dsn, f"audit_bench_{uuid.uuid4().hex[:8]}")
    log = await AuditLog.open(AuditConfig(), data_dir, store=store)
    try:
        await sustained(log, 2000, args.concurrency)  # warm-up
        rps = await sustained(log, args.records, args.concurrency)
        rates = [await latency_at(log, float(r), args.seconds) for r in args.rates.split(",")]
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
        "verified_records": report.num_records,
        "verify_ok": report.ok,
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "commit": COMMIT,
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "storage_dir": str(data_dir.parent),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
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
    result = asyncio.run(main(parser.parse_args()))
    suffix = "" if result["backend"] == "sqlite" else "_postgres"
    out = Path(__file__).parent / "results" / f"audit_throughput{suffix}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
