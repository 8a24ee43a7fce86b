"""What an HTTP listener of ours needs beyond its address: TLS and slow-client limits.

The gateway's ``[server]`` and the standalone engine's ``[engine_listener]`` each hold one of
both. Whether an address is loopback decides what may stay open: plain HTTP to an engine, the
dev token issuer, /metrics without a token.
"""

from __future__ import annotations

import ipaddress

import msgspec

from gateway.errors import ConfigError

__all__ = ["CLIENT_CERT_MODES", "ConnectionLimits", "TlsConfig", "is_loopback_host"]

CLIENT_CERT_MODES = ("none", "optional", "required")


def is_loopback_host(host: str) -> bool:
    """Whether a bind address reaches this machine only. Names other than ``localhost`` count as
    exposed: what they resolve to is not known when the settings are read."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class TlsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """TLS on a listener: off unless a certificate and key are given. TLS 1.2 is the minimum."""

    cert_file: str | None = None
    """PEM certificate chain (leaf first) presented to clients; relative to data_dir."""
    key_file: str | None = None
    """PEM private key of ``cert_file`` (unencrypted; protect it with file permissions)."""
    client_ca_file: str | None = None
    """PEM bundle of CAs whose client certificates are accepted (needed unless client_cert is "none")."""
    client_cert: str = "none"
    """Client certificates: "none" (not asked for), "optional" (verified when sent) or "required"
    (the handshake fails without one)."""

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("tls: cert_file and key_file go together")
        if self.client_cert not in CLIENT_CERT_MODES:
            raise ConfigError(f"tls.client_cert must be one of {CLIENT_CERT_MODES}, not {self.client_cert!r}")
        if self.client_cert != "none" and (self.client_ca_file is None or not self.is_enabled):
            raise ConfigError(
                f'tls.client_cert = "{self.client_cert}" needs cert_file, key_file and client_ca_file'
            )
        if self.client_ca_file is not None and self.client_cert == "none":
            raise ConfigError(
                'tls.client_ca_file is set but client_cert is "none": say "optional" or "required"'
            )

    @property
    def is_enabled(self) -> bool:
        return self.cert_file is not None

    @property
    def requires_client_cert(self) -> bool:
        return self.is_enabled and self.client_cert == "required"


class ConnectionLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Bounds on what a slow or greedy client can hold. Without them a connection that sends its
    headers one byte at a time is kept open for ever, and a few hundred of them exhaust the server."""

    header_timeout_s: float = 10.0
    """Longest time from a connection's start (or a request's first byte on a kept-alive one) to the
    end of the request's headers; past it the server answers 408 and closes."""
    body_timeout_s: float = 60.0
    """Longest time from the end of the headers to the last byte of the request body."""
    keep_alive_timeout_s: int = 5
    """How long an idle kept-alive connection waits for its next request."""
    max_head_bytes: int = 65_536
    """Largest request line plus headers; larger heads get 431 and the connection is closed."""
    max_connections: int = 4096
    """Open connections the listener holds at most; more are answered 503 and closed."""
    max_connections_per_client: int = 256
    """Open connections one client IP may hold; more are answered 429 and closed. 0: no per-client
    cap (for a listener behind a load balancer, where every connection has the balancer's IP)."""

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"limits.{name} must be positive")
        if self.max_head_bytes < 1024:
            raise ConfigError("limits.max_head_bytes must be at least 1024")
        if self.max_connections < 1:
            raise ConfigError("limits.max_connections must be at least 1")
        if self.max_connections_per_client < 0:
            raise ConfigError("limits.max_connections_per_client must be >= 0 (0: no cap)")
