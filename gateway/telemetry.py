"""OpenTelemetry providers built from ``[telemetry]``, and the gateway's own instruments.

Spans and metrics carry ids, model names, counts and durations; never prompt or completion text.
/metrics renders the same meter provider in Prometheus text through prometheus_client.

Without an OTLP endpoint no span leaves the process, so spans are not sampled: each request
still gets a fresh trace id (the audit record carries it), but no span is built, and metrics
keep no exemplars (they would only ever point at sampled spans): /metrics reads the same.

The per-request counters add into a plain dict that the meter reads at collection time
(observable counters): an OTel SDK ``Counter.add`` cleans and hashes its attributes on every
call, a dict increment costs a fraction of that (figures in bench/BENCHMARKS.md). Exported series
are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gateway.serving_metrics import ServingMetrics
from gateway.telemetry_config import TelemetryConfig
from gateway.worker_metrics import WorkerMetrics

__all__ = ["CountsByLabels", "Telemetry"]

_installed: Telemetry | None = None


class CountsByLabels:
    """A monotonic count per label set, summed in this process and read by the meter."""

    def __init__(self) -> None:
        self._counts: dict[tuple[tuple[str, str | int], ...], int] = {}

    def add(self, amount: int, attributes: Mapping[str, str | int]) -> None:
        """Same call as ``Counter.add``; callers pass each label set's keys in one fixed order."""
        key = tuple(attributes.items())
        self._counts[key] = self._counts.get(key, 0) + amount

    def observe(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        # dict() copies in one step under the GIL: safe against an OTLP reader thread.
        return [metrics.Observation(total, dict(key)) for key, total in dict(self._counts).items()]


class Telemetry:
    """Tracer and meter providers plus the instruments the request path records into."""

    def __init__(self, cfg: TelemetryConfig) -> None:
        resource = Resource.create({"service.name": cfg.service_name})
        is_tracing = bool(cfg.otlp_endpoint)
        self.tracer_provider = TracerProvider(resource=resource, sampler=None if is_tracing else ALWAYS_OFF)
        readers: list[MetricReader] = [PrometheusMetricReader()]
        if cfg.otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            base = cfg.otlp_endpoint.rstrip("/")
            self.tracer_provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=cfg.otlp_headers))
            )
            if cfg.export_metrics:
                exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=cfg.otlp_headers)
                readers.append(PeriodicExportingMetricReader(exporter))
        self.meter_provider = MeterProvider(
            resource=resource,
            metric_readers=readers,
            exemplar_filter=None if is_tracing else AlwaysOffExemplarFilter(),
        )
        self.tracer = self.tracer_provider.get_tracer("strongroom.gateway")
        meter = self.meter_provider.get_meter("strongroom.gateway")
        self.request_duration = meter.create_histogram(
            "strongroom.request.duration", unit="s", description="Gateway request duration"
        )
        self.tokens = CountsByLabels()
        meter.create_observable_counter(
            "strongroom.tokens", [self.tokens.observe], unit="{token}", description="Tokens by kind"
        )
        self.requests = CountsByLabels()
        meter.create_observable_counter(
            "strongroom.requests", [self.requests.observe], description="Requests by endpoint and status"
        )
        self.serving = ServingMetrics()
        self._workers: WorkerMetrics | None = None
        self._in_flight: Callable[[], int] = lambda: 0
        # The queue a HorizontalPodAutoscaler scales gateways on (deploy/helm: strongroom_requests_in_flight).
        meter.create_observable_gauge(
            "strongroom.requests.in_flight",
            [self._observe_in_flight],
            description="Generations this gateway has waiting on or running at engines",
        )

    def count_in_flight(self, source: Callable[[], int]) -> None:
        """Read the in-flight gauge from ``source`` (the engine pool) from now on."""
        self._in_flight = source

    def _observe_in_flight(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return [metrics.Observation(self._in_flight())]

    @classmethod
    def install(cls, cfg: TelemetryConfig) -> Telemetry:
        """Create the providers once per process and make them the global ones."""
        global _installed
        if _installed is None:
            _installed = cls(cfg)
            trace.set_tracer_provider(_installed.tracer_provider)
            metrics.set_meter_provider(_installed.meter_provider)
        return _installed

    def identify_worker(self, index: int, run_dir: Path) -> WorkerMetrics:
        """This process is gateway worker ``index``: /metrics shows every worker's series."""
        self._workers = WorkerMetrics(index, run_dir, self._own_text)
        return self._workers

    def _own_text(self) -> bytes:
        return generate_latest(REGISTRY) + generate_latest(self.serving.registry)

    def prometheus_text(self) -> tuple[bytes, str]:
        """The exposition text and its one Content-Type value (charset included once)."""
        text = self._own_text() if self._workers is None else self._workers.merged_text()
        return text, CONTENT_TYPE_LATEST

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
