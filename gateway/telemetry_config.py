"""The ``[telemetry]`` section: traces and metrics through OpenTelemetry."""

from __future__ import annotations

import msgspec

__all__ = ["TelemetryConfig"]


class TelemetryConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Exporters are off by default; /metrics serves Prometheus text to those allowed to read it."""

    service_name: str = "strongroom"
    """``service.name`` resource attribute on every span and metric."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector base URL (e.g. http://collector:4318); None keeps traces in-process only."""
    otlp_headers: dict[str, str] = {}
    """Extra headers for the OTLP exporter (e.g. an auth header for the collector)."""
    export_metrics: bool = False
    """Also push metrics over OTLP (Prometheus scraping of /metrics works either way)."""
    metrics_public: bool = False
    """Serve /metrics to anyone even when the gateway listens off loopback (it names models and
    shows traffic). Off: a loopback-bound gateway serves it openly, any other asks for the scrape
    token."""
    metrics_token_env: str = "STRONGROOM_METRICS_TOKEN"  # noqa: S105 (a variable name, not a secret)
    """Environment variable holding the bearer token a scraper presents for /metrics (at least 16
    characters; Prometheus: ``authorization.credentials_file``). Unset: /metrics off loopback is
    refused to everyone unless metrics_public."""
