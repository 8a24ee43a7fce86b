"""``strongroom serve`` with the audit log's stage profile (``bench.audit.gateway_stage --profile``).

    python -m bench.audit.gateway_profile serve      # then SIGUSR1: reset, SIGUSR2: write report

The gateway's log opens on a ``TimedSqliteStore`` with the ``StageProfile`` of
``bench/audit/throughput.py``, and every ``AuditLog.append`` is stamped, so a request's audit
record is split into the same stages as the benchmark's appends (to_writer, seal, insert,
commit, to_loop, wake). The writer's queue is stamped too, which splits ``to_writer`` into
``caller`` (encoding the event and queueing it, on the event loop) and ``queue_wake`` (until the
writer thread runs again, holding the GIL): sequential requests only, one put per get.
SIGUSR1 starts the profile afresh (after the warm-up); SIGUSR2 writes its report to
``$AUDIT_PROFILE_OUT``. Only for benchmarks: it patches the audit log's classes.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import time
from pathlib import Path
from typing import Any, ClassVar

import audit.group_commit
from audit.log import AuditLog
from bench.audit.throughput import StageProfile, TimedSqliteStore


class _StampedQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """The writer's queue, stamping each put and each item the writer got."""

    puts: ClassVar[list[float]] = []
    gets: ClassVar[list[float]] = []

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.puts.append(time.perf_counter())
        super().put(item, block, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        item = super().get(block, timeout)
        self.gets.append(time.perf_counter())
        return item


def _report(profile: StageProfile, starts: list[float]) -> dict[str, Any]:
    puts, gets = _StampedQueue.puts, _StampedQueue.gets
    report = profile.report()
    if len(starts) == len(puts) == len(gets):

        def median_ms(a: list[float], b: list[float]) -> float:
            return round(statistics.median(y - x for x, y in zip(a, b, strict=True)) * 1e3, 3)

        report["to_writer_median_ms"] = {
            "caller": median_ms(starts, puts),
            "queue_wake": median_ms(puts, gets),
        }
    return report


def install(out: Path) -> StageProfile:
    profile = StageProfile()
    starts: list[float] = []
    audit.group_commit.queue = type("queue", (), {"SimpleQueue": _StampedQueue, "Empty": queue.Empty})  # type: ignore[assignment]
    original_open = AuditLog.open.__func__  # type: ignore[attr-defined]
    original_append = AuditLog.append

    async def open_profiled(cls: type[AuditLog], cfg: Any, data_dir: Path, **kwargs: Any) -> AuditLog:
        store = TimedSqliteStore(cfg.resolve(data_dir, cfg.sqlite_path), profile)
        return await original_open(cls, cfg, data_dir, store=store, on_batch=profile.note_batch, **kwargs)

    async def append_stamped(self: AuditLog, event: Any, content: Any = None, *, served: bool = False) -> int:
        t0 = time.perf_counter()
        starts.append(t0)
        seq = await original_append(self, event, content, served=served)
        profile.note_append(seq, t0, time.perf_counter())
        return seq

    AuditLog.open = classmethod(open_profiled)  # type: ignore[assignment, method-assign]
    AuditLog.append = append_stamped  # type: ignore[method-assign]

    def reset(*_: object) -> None:
        profile.reset()
        for stamps in (starts, _StampedQueue.puts, _StampedQueue.gets):
            stamps.clear()

    signal.signal(signal.SIGUSR1, reset)
    signal.signal(signal.SIGUSR2, lambda *_: out.write_text(json.dumps(_report(profile, starts), indent=2)))
    return profile


if __name__ == "__main__":
    install(Path(os.environ["AUDIT_PROFILE_OUT"]))
    from strongroom.cli import main

    main()
