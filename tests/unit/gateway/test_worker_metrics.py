"""/metrics of several workers: each worker's series once, told apart by ``worker``."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.worker_metrics import WorkerMetrics


def _worker_text(requests: int) -> bytes:
    registry = CollectorRegistry()
    Counter("strongroom_requests", "Requests", ["route"], registry=registry).labels("/v1/x").inc(requests)
    Histogram("strongroom_request_duration_seconds", "Duration", registry=registry).observe(0.01)
    return generate_latest(registry)


def test_every_workers_series_appear_once_with_its_worker_label(tmp_path: Path) -> None:
    WorkerMetrics(1, tmp_path, lambda: _worker_text(5)).publish()
    text = WorkerMetrics(0, tmp_path, lambda: _worker_text(3)).merged_text().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {s.labels["worker"]: s.value for s in families["strongroom_requests"].samples}
    assert requests == {"0": 3.0, "1": 5.0}
    assert text.count("# TYPE strongroom_requests_total counter") == 1  # one family, valid exposition
    counts = [s for s in families["strongroom_request_duration_seconds"].samples if s.name.endswith("_count")]
    assert sorted(s.labels["worker"] for s in counts) == ["0", "1"]
    info = families["strongroom_gateway_worker_info"].samples
    assert {s.labels["worker"]: s.labels["pid"] for s in info} == {
        "0": str(os.getpid()),
        "1": str(os.getpid()),
    }
