"""The gateway's errors as gRPC statuses: the one place where an error meets gRPC.

The table is the one in ``inference.proto``. The status details carry the error's message (the
same words the HTTP body carries: opaque for security refusals); the trailing metadata carries
OpenAI's error type, code and param, and the error's headers (``retry-after``, ``x-ratelimit-*``).
"""

from __future__ import annotations

import grpc

from gateway.errors import ContentPolicyError, GatewayError

__all__ = ["StatusOf", "status_of"]

_BY_HTTP_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    503: grpc.StatusCode.UNAVAILABLE,
}

StatusOf = tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]


def status_of(err: GatewayError, request_id: str) -> StatusOf:
    """(code, details, trailing metadata) for ``err``."""
    if err.code == ContentPolicyError.code:
        # A policy refusal, not a malformed request: retrying the same text cannot succeed.
        code = grpc.StatusCode.PERMISSION_DENIED
    else:
        fallback = grpc.StatusCode.INTERNAL if err.status_code >= 500 else grpc.StatusCode.INVALID_ARGUMENT
        code = _BY_HTTP_STATUS.get(err.status_code, fallback)
    trailing = [("x-request-id", request_id), ("x-error-type", err.type), ("x-error-code", err.code)]
    if err.param:
        trailing.append(("x-error-param", err.param))
    trailing += [(k.lower(), str(v)) for k, v in err.headers.items() if str(v).isascii()]
    return code, err.message, tuple(trailing)
