"""Gateway errors as gRPC statuses: the table in inference.proto."""

from __future__ import annotations

import grpc
import pytest

from gateway.errors import (
    AuditUnavailable,
    BadRequestError,
    ContentPolicyError,
    GatewayError,
    ModelNotFoundError,
    NoEngineError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from gateway.grpc_api.status import status_of
from gateway.quota.errors import QuotaExceededError


def _rate_limited() -> GatewayError:
    return QuotaExceededError("Rate limit reached", limit="requests", retry_after_s=7, retryable=True)


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (BadRequestError("bad", param="n"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            ContentPolicyError("The request was blocked by the content policy"),
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        (UnauthenticatedError("expired"), grpc.StatusCode.UNAUTHENTICATED),
        (PermissionDeniedError("no"), grpc.StatusCode.PERMISSION_DENIED),
        (ModelNotFoundError("absent"), grpc.StatusCode.NOT_FOUND),
        (_rate_limited(), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (NoEngineError("down"), grpc.StatusCode.UNAVAILABLE),
        (AuditUnavailable("audit down"), grpc.StatusCode.UNAVAILABLE),
        (GatewayError("internal error"), grpc.StatusCode.INTERNAL),
    ],
)
def test_each_http_status_has_its_code(err: GatewayError, code: grpc.StatusCode) -> None:
    assert status_of(err, "req_1")[0] == code


def test_the_message_is_the_details_and_the_openai_fields_trail() -> None:
    _, details, trailing = status_of(BadRequestError("n must be at least 1", param="n"), "req_1")
    assert details == "n must be at least 1"
    assert dict(trailing) == {
        "x-request-id": "req_1",
        "x-error-type": "invalid_request_error",
        "x-error-code": "invalid_request",
        "x-error-param": "n",
    }


def test_an_unauthenticated_caller_reads_only_the_opaque_message() -> None:
    _, details, trailing = status_of(UnauthenticatedError("signature of kid k1 invalid"), "req_1")
    assert details == "Invalid token" and "k1" not in repr(trailing)


def test_a_rate_limit_trails_its_retry_after() -> None:
    _, _, trailing = status_of(_rate_limited(), "req_1")
    assert dict(trailing)["retry-after"] == "7"
