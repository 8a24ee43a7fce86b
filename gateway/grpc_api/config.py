"""The ``[grpc]`` section: the gRPC API beside the HTTP one."""

from __future__ import annotations

import msgspec

from gateway.errors import ConfigError

__all__ = ["GrpcConfig"]


class GrpcConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The gRPC API (``gateway/grpc_api/inference.proto``): chat, completions, embeddings and the
    model list, through the same authentication, policy, filters, quotas and audit as HTTP."""

    enabled: bool = True
    """Serve the gRPC API on ``port``, beside the HTTP API."""
    port: int = 50051
    """TCP port of the gRPC API (gRPC's customary port), on ``server.host``, with ``server.tls``
    when that is enabled (client certificates: "required" is enforced; "optional" asks for none
    over gRPC). Messages are limited to ``server.max_body_bytes``, as HTTP bodies are."""

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"grpc.port must be in 1..65535, not {self.port}")
