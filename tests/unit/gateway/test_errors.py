from __future__ import annotations

import json

from engine.errors import (
    EngineError,
    EngineOverloadedError,
    EngineUnavailableError,
    InvalidRequestError,
    PromptTooLongError,
    UnknownModelError,
)
from gateway.errors import (
    BadRequestError,
    UnauthenticatedError,
    http_error_of,
    recorded_reason,
    response_parts,
)
from policies.errors import InvalidPolicyError


def test_engine_errors_map_to_openai_statuses() -> None:
    cases = [
        (UnknownModelError("m"), 404, "model_not_found"),
        (InvalidRequestError("bad", param="top_p"), 400, "invalid_request"),
        (PromptTooLongError("long"), 400, "context_length_exceeded"),
        (EngineOverloadedError("busy"), 429, "engine_overloaded"),
        (EngineUnavailableError("down"), 503, "engine_unavailable"),
        (EngineError("boom"), 500, "internal_error"),
    ]
    for exc, status, code in cases:
        err = http_error_of(exc)
        assert (err.status_code, err.code) == (status, code), exc
    assert http_error_of(InvalidRequestError("bad", param="top_p")).param == "top_p"


def test_sibling_package_errors_map_by_their_attributes() -> None:
    err = http_error_of(InvalidPolicyError("role name 'a b' has a space"))
    assert err.status_code == 400 and err.type == "invalid_request_error"


def test_unknown_exceptions_become_an_opaque_500() -> None:
    status, body, _ = response_parts(RuntimeError("secret detail /etc/x"))
    assert status == 500
    assert json.loads(body) == {
        "error": {
            "message": "internal error",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }


def test_authentication_failures_never_show_their_reason() -> None:
    status, body, _ = response_parts(UnauthenticatedError("kid abc not in JWKS"))
    assert status == 401
    assert json.loads(body)["error"]["message"] == "Invalid token"
    assert b"kid" not in body


def test_recorded_reasons_keep_no_client_values() -> None:
    """The client reads its own values back in the message; the audit record never keeps them."""
    cases = {
        "Invalid enum value 'user 4111 1111 1111 1111' - at `$.messages[0].role`": (
            "invalid_request: Invalid enum value … - at `$.messages[0].role`"
        ),
        "Object contains unknown field `AKIAIOSFODNN7EXAMPLE`": "invalid_request: Object contains unknown field …",
        "The model 'it's a \"secret\"' does not exist": "invalid_request: The model … does not exist",
        'invalid role "a\'b" (x)': "invalid_request: invalid role … (x)",
    }
    for message, reason in cases.items():
        assert recorded_reason(BadRequestError(message)) == reason
