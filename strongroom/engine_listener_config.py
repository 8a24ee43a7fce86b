"""The ``[engine_listener]`` section: where a standalone ``strongroom engine`` listens.

Off loopback an engine serves only mutual TLS: it holds the models and trusts whoever presents
the engine token, so the token must never cross a network in clear and a stolen token alone
must not be enough. The engine that ``serve`` supervises listens on a loopback port that the
supervisor binds; of this section it uses only ``limits``.
"""

from __future__ import annotations

import msgspec

from gateway.errors import ConfigError
from gateway.listener_config import ConnectionLimits, TlsConfig

__all__ = ["EngineListenerConfig"]


class EngineListenerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The engine's HTTP listener (``strongroom engine``); --host and --port override it."""

    host: str = "127.0.0.1"
    """Address a standalone engine binds; off loopback it needs tls with client_cert = "required"."""
    port: int = 8100
    """TCP port of the engine protocol."""
    tls: TlsConfig = msgspec.field(default_factory=TlsConfig)
    """The engine's certificate and the CA of the gateways' client certificates (mutual TLS)."""
    limits: ConnectionLimits = msgspec.field(
        default_factory=lambda: ConnectionLimits(max_connections_per_client=0)
    )
    """Header and body read timeouts and connection caps of the engine's listener. No per-client
    cap by default: its clients are a few gateways, each pooling many connections."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"engine_listener.port must be in 1..65535, not {self.port}")
