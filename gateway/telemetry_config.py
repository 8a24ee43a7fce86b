"""The ``[telemetry]`` section: traces and metrics through OpenTelemetry."""

from __future__ import annotations

import msgspec

__all__ = ["TelemetryConfig"]


class TelemetryConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Exporters are off by default; /metrics (Prometheus text) is always served."""

    service_name: str = "strongroom"
    """``service.name`` resource attribute on every span and metric."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector base URL (e.g. http://collector:4318); None keeps traces in-process only."""
    otlp_headers: dict[str, str] = {}
    """Extra headers for the OTLP exporter (e.g. an auth header for the collector)."""
    export_metrics: bool = False
    """Also push metrics over OTLP (Prometheus scraping of /metrics works either way)."""
    metrics_public: bool = True
    """Serve /metrics without a token (bind the gateway to a trusted network if so)."""
