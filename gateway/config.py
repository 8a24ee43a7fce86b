"""The ``[server]`` section: where the gateway listens and how it reaches its engines."""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

from gateway.errors import ConfigError
from gateway.listener_config import ConnectionLimits, TlsConfig, is_loopback_host

__all__ = ["EngineTlsConfig", "ServerConfig"]


class EngineTlsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the gateway proves itself to https engines and checks them (mutual TLS)."""

    ca_file: str | None = None
    """PEM bundle of the CAs that sign the engines' certificates; None trusts the system's CAs."""
    cert_file: str | None = None
    """PEM client certificate the gateway presents to engines; relative to data_dir."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("server.engine_tls: cert_file and key_file go together")


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway's HTTP listener and its engine pool."""

    host: str = "127.0.0.1"
    """Address the gateway binds; loopback by default so nothing is exposed until you choose to."""
    port: int = 8000
    """TCP port of the OpenAI-compatible API."""
    tls: TlsConfig = msgspec.field(default_factory=TlsConfig)
    """TLS on the gateway's listener (HTTPS), optionally with client certificates. Off by default;
    terminate TLS here or in a proxy on the same host before binding off loopback."""
    limits: ConnectionLimits = msgspec.field(default_factory=ConnectionLimits)
    """Header and body read timeouts and connection caps of the gateway's listener."""
    workers: int = 0
    """Gateway processes ``serve`` runs on the one listening socket. 0: one per CPU core when
    ``redis_url`` is set, else 1 (quotas live in Redis only; without it each process would keep
    its own). More than 1 needs ``redis_url``. Workers share the audit log through the
    supervisor, which is its one writer; a policy change made through one worker is in force on
    all within ``access.poll_interval_s``. Connection limits apply per worker."""
    max_body_bytes: int = 1_048_576
    """Largest accepted request body; larger bodies get 413 before they are parsed."""
    engine_urls: tuple[str, ...] = ()
    """Remote engine instances (https://host:port; http:// only on a loopback host). Empty: ``serve``
    starts and supervises one local engine on a loopback port."""
    engine_tls: EngineTlsConfig = msgspec.field(default_factory=EngineTlsConfig)
    """Client certificate and CA for https engine_urls (engines off loopback require mutual TLS)."""
    engine_token_env: str = "STRONGROOM_ENGINE_TOKEN"  # noqa: S105 (a variable name, not a secret)
    """Environment variable holding the shared secret between gateway and engines. For a local
    engine a fresh random token is generated when it is unset."""
    engine_connect_timeout_s: float = 2.0
    """Connect timeout towards an engine; past it the engine counts as down (503)."""
    engine_start_timeout_s: float = 300.0
    """How long ``serve`` waits for the local engine to load its models."""
    engine_refresh_s: float = 5.0
    """How often the gateway re-reads each engine's model list, stats and key-operation events."""
    engine_heartbeat_s: float = 0.25
    """Pause between two health probes of one engine; an engine that answers again is back in
    service within about this long."""
    engine_heartbeat_timeout_s: float = 0.75
    """A health probe with no answer within this long is a miss."""
    engine_heartbeat_misses: int = 2
    """Misses in a row that take an engine out of service and abort its requests in flight (a hung
    engine is noticed within about misses x (heartbeat + timeout) seconds)."""
    drain_s: float = 30.0
    """On SIGTERM the gateway stops accepting connections and lets requests in flight finish for
    at most this long before it closes them."""
    request_timeout_s: float = 600.0
    """Longest a single generation may take end to end."""
    allow_token_id_prompts: bool = False
    """Accept /v1/completions prompts given as token ids. The request filters read text only, so
    token ids would carry content past them: keep this off unless every caller is trusted
    (benchmark rigs)."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"server.port must be in 1..65535, not {self.port}")
        if self.max_body_bytes < 1024:
            raise ConfigError("server.max_body_bytes must be at least 1024")
        if self.engine_heartbeat_s <= 0 or self.engine_heartbeat_timeout_s <= 0:
            raise ConfigError("server.engine_heartbeat_s and engine_heartbeat_timeout_s must be positive")
        if self.engine_heartbeat_misses < 1:
            raise ConfigError("server.engine_heartbeat_misses must be at least 1")
        if self.workers < 0:
            raise ConfigError(f"server.workers must be 0 (one per core) or more, not {self.workers}")
        if self.drain_s < 0:
            raise ConfigError("server.drain_s must not be negative")
        for url in self.engine_urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"server.engine_urls: {url!r} is not an http(s) URL")
            if url.startswith("http://") and not is_loopback_host(urlsplit(url).hostname or ""):
                # The token would cross the network in clear, and the engine refuses it anyway.
                raise ConfigError(f"server.engine_urls: {url!r} must be https (http only on loopback)")

    @property
    def is_loopback(self) -> bool:
        """Whether the gateway listens on this machine only."""
        return is_loopback_host(self.host)
