"""How the gateway and the engine listen: uvicorn with our TLS context and slow-client guard, and
the start-up checks that refuse an exposed listener with an unsafe setting.

    bind address   loopback                 anything else
    gateway        any settings             dev issuer off (a warning without TLS: use a proxy)
    engine         plain HTTP + token       TLS with client certificates required, + token
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from gateway.errors import ConfigError
from gateway.listener_config import ConnectionLimits, TlsConfig, is_loopback_host
from gateway.tls_context import listener_context
from strongroom.config import Settings
from strongroom.slow_client_guard import guarded_protocol

log = logging.getLogger("strongroom.serve")

__all__ = ["Listener", "check_engine_exposure", "check_gateway_exposure", "check_port_free"]


class Listener:
    """One HTTP listener's uvicorn configuration."""

    def __init__(
        self, tls: TlsConfig, limits: ConnectionLimits, *, resolve: Callable[[str], Path], where: str
    ) -> None:
        # Built now, so a missing or mismatched certificate fails start-up with the key's name.
        self.ssl_context = listener_context(tls, resolve, f"{where}.tls") if tls.is_enabled else None
        self.limits = limits

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def uvicorn_config(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 8000, drain_s: float | None = None
    ) -> uvicorn.Config:
        context = self.ssl_context
        return uvicorn.Config(
            app,
            host=host,
            port=port,
            timeout_graceful_shutdown=None if drain_s is None else int(drain_s),
            http=guarded_protocol(self.limits),
            timeout_keep_alive=self.limits.keep_alive_timeout_s,
            ssl_context_factory=None if context is None else (lambda _config, _default: context),
            log_level="warning",
            access_log=False,
            lifespan="on",
        )

    def serve(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        sock: socket.socket | None = None,
        drain_s: float | None = None,
    ) -> None:
        """Serve until stopped; a server that never started (port taken, start-up failed) exits
        non-zero, as ``uvicorn.run`` does. On SIGTERM requests in flight get ``drain_s`` seconds
        (None: as long as they take)."""
        server = uvicorn.Server(self.uvicorn_config(app, host=host, port=port, drain_s=drain_s))
        server.run(sockets=[sock] if sock is not None else None)
        if not server.started:
            raise SystemExit(3)


def check_gateway_exposure(settings: Settings) -> None:
    """Refuse to serve the dev token issuer off loopback; warn about plain HTTP there."""
    server = settings.server
    if server.is_loopback:
        return
    if settings.auth.dev_issuer:
        raise ConfigError(
            f"refusing to start: server.host is {server.host!r}, not a loopback address, and the dev "
            "token issuer is on (auth.dev_issuer), so tokens minted by `strongroom token` from the "
            "key under data_dir would be accepted from the network. Configure an [[auth.issuers]] "
            'entry and set [auth] dev_issuer = false, or bind server.host = "127.0.0.1".'
        )
    if not server.tls.is_enabled:
        log.warning(
            "the gateway listens on %s over plain HTTP: tokens and prompts cross the network in clear "
            "unless a TLS proxy on this host fronts it ([server.tls] enables HTTPS here)",
            server.host,
        )


def check_engine_exposure(host: str, tls: TlsConfig) -> None:
    """Refuse an engine off loopback unless it serves mutual TLS."""
    if is_loopback_host(host) or tls.requires_client_cert:
        return
    raise ConfigError(
        f"refusing to start: the engine would listen on {host!r}, not a loopback address, without "
        "mutual TLS. Set [engine_listener.tls] cert_file, key_file, client_ca_file and "
        'client_cert = "required" (the gateway then needs [server.engine_tls] and an https engine URL), '
        "or bind 127.0.0.1."
    )


def check_port_free(host: str, port: int, what: str) -> None:
    """Refuse a start whose port someone holds, before the engine loads (a listener that binds late,
    as the gRPC API does once the gateway's services are up, would otherwise fail only then)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None
