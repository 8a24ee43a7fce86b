"""/metrics across gateway workers: every worker's series in one answer, told apart by a label.

The meters are OpenTelemetry's, read through prometheus_client's default registry, so
prometheus_client's own multiprocess mode (which replaces the registry's values with mmap files)
does not apply. Instead each worker publishes its exposition text to its file in the
supervisor's private run directory, at every scrape it answers and once a second otherwise;
the worker that answers a scrape merges its fresh text with the others' files, adding
``worker="<index>"`` to every sample. A sibling's series are thus at most about a second old;
sum over ``worker`` for the whole gateway. A restarted worker starts its counters from zero
under the same label, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["WorkerMetrics"]

_log = logging.getLogger(__name__)

PUBLISH_EVERY_S = 1.0


def _file_of(run_dir: Path, index: int) -> Path:
    return run_dir / f"metrics-{index}.prom"


class _Merged:
    """A collector over already-parsed families (what ``generate_latest`` renders)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class WorkerMetrics:
    def __init__(self, index: int, run_dir: Path, render: Callable[[], bytes]) -> None:
        """``render``: this worker's own exposition text."""
        self.index = index
        self._run_dir = run_dir
        self._render = render
        self._publishing: asyncio.Task[None] | None = None
        self._identity = (
            b"# HELP strongroom_gateway_worker_info The gateway worker process behind the worker label\n"
            b"# TYPE strongroom_gateway_worker_info gauge\n"
            b'strongroom_gateway_worker_info{pid="%d"} 1.0\n' % os.getpid()
        )

    def __repr__(self) -> str:
        return f"WorkerMetrics(index={self.index})"

    def publish(self) -> bytes:
        """Write this worker's text (atomically: a reader never sees half a file); returns it."""
        text = self._render() + self._identity
        path = _file_of(self._run_dir, self.index)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_bytes(text)
        temp.replace(path)
        return text

    def start_publishing(self) -> None:
        if self._publishing is None:
            self._publishing = asyncio.get_running_loop().create_task(self._publish_forever())

    async def _publish_forever(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_EVERY_S)
            try:
                self.publish()
            except OSError as exc:  # the run directory is gone: the supervisor is stopping
                _log.debug("metrics not published: %s", exc)

    def merged_text(self) -> bytes:
        """Every worker's series, this one's fresh, each sample labelled with its worker."""
        texts = {self.index: self.publish()}
        for path in self._run_dir.glob("metrics-*.prom"):
            index = int(path.stem.partition("-")[2])
            if index != self.index:
                with contextlib.suppress(OSError):
                    texts[index] = path.read_bytes()
        families: dict[str, Metric] = {}
        for index, text in sorted(texts.items()):
            for family in text_string_to_metric_families(text.decode()):
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type)
                merged.samples.extend(
                    Sample(s.name, {**s.labels, "worker": str(index)}, s.value, s.timestamp, s.exemplar)
                    for s in family.samples
                )
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(list(families.values())))
        return generate_latest(registry)
