"""OpenTelemetry providers built from ``[telemetry]``, and the gateway's own instruments.

Spans and metrics carry ids, model names, counts and durations; never prompt or completion text.
/metrics renders the same meter provider in Prometheus text through prometheus_client.
"""

from __future__ import annotations

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gateway.telemetry_config import TelemetryConfig

__all__ = ["Telemetry"]

_installed: Telemetry | None = None


class Telemetry:
    """Tracer and meter providers plus the instruments the request path records into."""

    def __init__(self, cfg: TelemetryConfig) -> None:
        resource = Resource.create({"service.name": cfg.service_name})
        self.tracer_provider = TracerProvider(resource=resource)
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
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self.tracer = self.tracer_provider.get_tracer("strongroom.gateway")
        meter = self.meter_provider.get_meter("strongroom.gateway")
        self.request_duration = meter.create_histogram(
            "strongroom.request.duration", unit="s", description="Gateway request duration"
        )
        self.tokens = meter.create_counter("strongroom.tokens", unit="{token}", description="Tokens by kind")
        self.requests = meter.create_counter(
            "strongroom.requests", description="Requests by endpoint and status"
        )

    @classmethod
    def install(cls, cfg: TelemetryConfig) -> Telemetry:
        """Create the providers once per process and make them the global ones."""
        global _installed
        if _installed is None:
            _installed = cls(cfg)
            trace.set_tracer_provider(_installed.tracer_provider)
            metrics.set_meter_provider(_installed.meter_provider)
        return _installed

    @staticmethod
    def prometheus_text() -> tuple[bytes, str]:
        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
