"""The settings a gateway process reads, as the gateway names them.

``strongroom.config.Settings`` (the TOML file and environment, one level up) provides them; the
gateway names the sections it reads here instead of importing strongroom, so the import layers
stay one-way (pyproject.toml's import-linter contracts). Read-only: settings are never changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from audit.config import AuditConfig
from filters.config import FilterConfig
from gateway.auth.config import AuthConfig
from gateway.config import ServerConfig
from gateway.console.config import ConsoleConfig
from gateway.grpc_api.config import GrpcConfig
from gateway.quota.config import QuotaConfig
from gateway.telemetry_config import TelemetryConfig
from keys.config import KeysConfig
from policies.config import AccessConfig

__all__ = ["GatewaySettings"]


class GatewaySettings(Protocol):
    """The sections of the settings the gateway's services, routes and console read."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def server(self) -> ServerConfig: ...
    @property
    def grpc(self) -> GrpcConfig: ...
    @property
    def auth(self) -> AuthConfig: ...
    @property
    def access(self) -> AccessConfig: ...
    @property
    def quota(self) -> QuotaConfig: ...
    @property
    def filters(self) -> FilterConfig: ...
    @property
    def keys(self) -> KeysConfig: ...
    @property
    def audit(self) -> AuditConfig: ...
    @property
    def telemetry(self) -> TelemetryConfig: ...
    @property
    def console(self) -> ConsoleConfig: ...
    @property
    def data_path(self) -> Path:
        """Where models, keys, the audit log and policies live (absolute)."""
        ...

    def resolve(self, path: str) -> Path:
        """A configured path: absolute as given, else under the data directory."""
        ...
