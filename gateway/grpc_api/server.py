"""``GrpcServer``: the gRPC API's grpc.aio server, in the event loop of the gateway process it serves.

One per gateway process, started once the process's ``Services`` are up (the app's lifespan) and
stopped before they close. With several gateway workers each binds the port with SO_REUSEPORT
and the kernel spreads connections over them, as it does for HTTP (``serve`` first checks that
nobody else holds the port); a lone gateway binds it exclusively, so a second one is refused.
"""

from __future__ import annotations

import logging

import grpc

from gateway.errors import ConfigError
from gateway.grpc_api import inference_pb2_grpc as pb_grpc
from gateway.grpc_api.servicer import InferenceServicer
from gateway.services import Services
from gateway.settings import GatewaySettings

__all__ = ["GrpcServer"]

log = logging.getLogger("strongroom.gateway")


class GrpcServer:
    def __init__(self, server: grpc.aio.Server, port: int) -> None:
        self._server = server
        self.port = port

    @classmethod
    async def start(cls, services: Services, *, shares_port: bool = False) -> GrpcServer:
        """Listen on ``[grpc] port``; raises RuntimeError when the port cannot be bound."""
        settings = services.settings
        options = [
            ("grpc.so_reuseport", 1 if shares_port else 0),
            ("grpc.max_receive_message_length", settings.server.max_body_bytes),
        ]
        server = grpc.aio.server(options=options)
        pb_grpc.add_InferenceServicer_to_server(InferenceServicer(services), server)  # type: ignore[no-untyped-call]
        host = settings.server.host
        address = f"[{host}]:{settings.grpc.port}" if ":" in host else f"{host}:{settings.grpc.port}"
        try:
            if settings.server.tls.is_enabled:
                port = server.add_secure_port(address, _credentials(settings))
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise RuntimeError(f"cannot listen for gRPC on {address}: {exc}") from None
        await server.start()
        log.info("gRPC API listening on %s", address)
        return cls(server, port)

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls, give those in flight ``grace_s`` seconds, then cancel them."""
        await self._server.stop(grace_s)


def _credentials(settings: GatewaySettings) -> grpc.ServerCredentials:
    """``server.tls`` for gRPC: the same certificate and key, and client CAs when they are required."""
    tls = settings.server.tls
    assert tls.cert_file is not None and tls.key_file is not None

    def read(key: str, path: str) -> bytes:
        try:
            return settings.resolve(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"server.tls.{key}: {exc}") from None

    cert, key = read("cert_file", tls.cert_file), read("key_file", tls.key_file)
    ca = read("client_ca_file", tls.client_ca_file) if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=tls.requires_client_cert
    )
