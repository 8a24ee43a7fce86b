"""The gateway's errors and the one place where any exception becomes an HTTP response.

Every error body has OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` so
OpenAI SDKs raise their usual exception classes. Security failures stay opaque: the client
sees a fixed message, the audit record gets the precise reason.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec

from engine.errors import (
    EngineError,
    EngineOverloadedError,
    EngineUnavailableError,
    InvalidRequestError,
    ModelLoadError,
    RequestAbortedError,
    UnknownModelError,
)

log = logging.getLogger("strongroom.gateway")

__all__ = [
    "BadRequestError",
    "ConfigError",
    "ContentPolicyError",
    "GatewayError",
    "ModelNotFoundError",
    "NoEngineError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "UnauthenticatedError",
    "error_body",
    "http_error_of",
    "recorded_reason",
]


class ConfigError(ValueError):
    """The settings are invalid; raised at start-up, never while serving."""


class GatewayError(Exception):
    """An error with an HTTP status and an OpenAI error type and code."""

    status_code = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}


class BadRequestError(GatewayError):
    status_code = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContentPolicyError(BadRequestError):
    code = "content_policy_violation"


class UnauthenticatedError(GatewayError):
    status_code = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def __init__(self, reason: str) -> None:
        # The reason is for the audit record only; the client always reads the same words.
        super().__init__("Invalid token")
        self.reason = reason


class PermissionDeniedError(GatewayError):
    status_code = 403
    type = "invalid_request_error"
    code = "model_not_allowed"


class ModelNotFoundError(GatewayError):
    status_code = 404
    type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLargeError(GatewayError):
    status_code = 413
    type = "invalid_request_error"
    code = "request_too_large"


class NoEngineError(GatewayError):
    status_code = 503
    type = "server_error"
    code = "engine_unavailable"


class ClientDisconnectedError(GatewayError):
    """The caller went away before the answer; nobody reads this response (nginx's 499)."""

    status_code = 499
    type = "invalid_request_error"
    code = "client_disconnected"


class AuditUnavailable(GatewayError):
    status_code = 503
    type = "server_error"
    code = "audit_unavailable"


class ErrorDetail(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(msgspec.Struct, frozen=True):
    error: ErrorDetail


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return msgspec.json.encode(ErrorBody(ErrorDetail(message=message, type=type_, param=param, code=code)))


def _engine_error(exc: EngineError) -> GatewayError:
    if isinstance(exc, UnknownModelError):
        return ModelNotFoundError(exc.message, param="model")
    err: GatewayError
    if isinstance(exc, InvalidRequestError):
        err = BadRequestError(exc.message, param=exc.param)
        err.code = exc.code
        return err
    if isinstance(exc, EngineOverloadedError):
        err = GatewayError(exc.message, headers={"retry-after": "1"})
        err.status_code, err.type, err.code = 429, "rate_limit_error", exc.code
        return err
    if isinstance(exc, EngineUnavailableError | ModelLoadError | RequestAbortedError):
        return NoEngineError("no engine is available for this model")
    return GatewayError("the engine failed to serve the request")


def http_error_of(exc: BaseException) -> GatewayError:
    """Map any exception to a GatewayError: the only place errors meet HTTP."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, EngineError):
        return _engine_error(exc)
    status = getattr(exc, "status_code", None)
    code = getattr(exc, "code", None)
    if isinstance(status, int) and isinstance(code, str):
        # Errors of the sibling packages (policies, filters, audit, quota) carry these attributes.
        err = GatewayError(str(exc), headers=dict(getattr(exc, "headers", {}) or {}))
        err.status_code, err.code = status, code
        err.type = _TYPE_BY_STATUS.get(status, "server_error")
        err.param = getattr(exc, "param", None)
        return err
    log.exception("unhandled error", exc_info=exc)
    return GatewayError("internal error")


_TYPE_BY_STATUS: dict[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


_QUOTED = re.compile(r"'.*'|\".*\"|`.*`", re.DOTALL)


def recorded_reason(err: GatewayError) -> str:
    """What the audit record keeps of an error: its code and message without the client's values.

    Messages quote what the client sent (a role, a model name, an unknown field, an enum value)
    so the caller can fix it; the record must not keep it (a role string can hold a card
    number). Everything from a message's first quote to its last of the same kind is cut;
    a JSON path at the end (msgspec's `` - at `$.messages[0].role` ``) names the schema and stays.
    """
    message, sep, path = err.message.partition(" - at `$")
    return f"{err.code}: {_QUOTED.sub('…', message)}{sep}{path if sep else ''}"


def response_parts(exc: BaseException) -> tuple[int, bytes, dict[str, Any]]:
    err = http_error_of(exc)
    return err.status_code, error_body(err.message, err.type, err.code, err.param), err.headers
