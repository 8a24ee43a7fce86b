"""Who may read /metrics: it names the served models and shows who uses them how much.

A loopback-bound gateway serves it openly (only this host reaches it), as does one whose
operator opened it (``telemetry.metrics_public``). Any other asks for a scrape token from the
environment, not a JWT: scrapers hold one static credential file (Prometheus'
``credentials_file``), the token opens /metrics and nothing else, and it rotates without
touching the identity provider or the access policy.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping

from gateway.config import ServerConfig
from gateway.errors import ConfigError
from gateway.telemetry_config import TelemetryConfig

log = logging.getLogger("strongroom.gateway")

__all__ = ["MetricsAccess"]

_MIN_TOKEN_CHARS = 16


class MetricsAccess:
    """Decides each /metrics request from its Authorization header."""

    def __init__(self, telemetry: TelemetryConfig, server: ServerConfig, environ: Mapping[str, str]) -> None:
        self.is_open = telemetry.metrics_public or server.is_loopback
        token = environ.get(telemetry.metrics_token_env, "")
        if token and len(token) < _MIN_TOKEN_CHARS:
            raise ConfigError(
                f"${telemetry.metrics_token_env} must be at least {_MIN_TOKEN_CHARS} characters"
            )
        self._token = token.encode() if token else None
        if not self.is_open and self._token is None:
            log.warning(
                "/metrics is refused to everyone: the gateway listens on %s and $%s is unset",
                server.host,
                telemetry.metrics_token_env,
            )

    def allows(self, authorization: str | None) -> bool:
        if self.is_open:
            return True
        if self._token is None or not authorization:
            return False
        scheme, _, given = authorization.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)
