"""SSL contexts built from the TLS settings: one for a listener, one for the gateway's engine client.

Both pin TLS 1.2 as the floor whatever the system's OpenSSL defaults to, so a downgrade to
TLS 1.0/1.1 is refused by us rather than by a distribution setting. A client context always
verifies the peer's certificate and host name (``ssl.create_default_context``).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

from gateway.config import EngineTlsConfig
from gateway.errors import ConfigError
from gateway.listener_config import TlsConfig

__all__ = ["engine_client_context", "listener_context"]

_VERIFY_MODES = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

Resolve = Callable[[str], Path]


def _load(where: str, action: Callable[[], None]) -> None:
    try:
        action()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def listener_context(cfg: TlsConfig, resolve: Resolve, where: str = "server.tls") -> ssl.SSLContext:
    """The server side of a listener with ``cfg.is_enabled``."""
    assert cfg.cert_file is not None and cfg.key_file is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = resolve(cfg.cert_file), resolve(cfg.key_file)
    _load(f"{where}.cert_file/key_file", lambda: ctx.load_cert_chain(cert, key))
    if cfg.client_ca_file is not None:
        ca = resolve(cfg.client_ca_file)
        _load(f"{where}.client_ca_file", lambda: ctx.load_verify_locations(cafile=ca))
    ctx.verify_mode = _VERIFY_MODES[cfg.client_cert]
    return ctx


def engine_client_context(cfg: EngineTlsConfig, resolve: Resolve) -> ssl.SSLContext:
    """The gateway's side of its https engine connections: verifies the engine, presents our cert."""
    ca = resolve(cfg.ca_file) if cfg.ca_file is not None else None
    try:
        ctx = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"server.engine_tls.ca_file: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.cert_file is not None and cfg.key_file is not None:
        cert, key = resolve(cfg.cert_file), resolve(cfg.key_file)
        _load("server.engine_tls.cert_file/key_file", lambda: ctx.load_cert_chain(cert, key))
    return ctx
