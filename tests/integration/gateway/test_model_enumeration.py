"""A model the caller may not use reads as absent everywhere; hostile JSON is a 400 (issue 18, #10)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.auth.dev_issuer import DevIssuer

pytestmark = pytest.mark.integration

# The default policy: analyst may not use demo-base; the stub engine serves every configured model.
FORBIDDEN, UNKNOWN = "demo-base", "no-such-model"


def _bodies(model: str) -> dict[str, dict[str, Any]]:
    return {
        "/v1/chat/completions": {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        },
        "/v1/completions": {"model": model, "prompt": "hi", "max_tokens": 2},
    }


def _token(gateway: Any, *roles: str) -> dict[str, str]:
    token = DevIssuer.load_or_create(gateway.data_dir).mint("ann", roles)
    return {"authorization": f"Bearer {token}"}


def test_a_forbidden_model_answers_like_an_unknown_one(stub_gateway: Any) -> None:
    models = httpx.get(f"{stub_gateway.v1}/models", headers=_token(stub_gateway, "admin")).json()["data"]
    assert FORBIDDEN in {m["id"] for m in models}  # it exists; the analyst may not use it
    assert all(m["quantization"] is None for m in models)  # the stub serves unquantized weights
    headers = _token(stub_gateway, "analyst")
    for path in _bodies(FORBIDDEN):
        answers = []
        for model in (FORBIDDEN, UNKNOWN):
            r = httpx.post(f"{stub_gateway.base_url}{path}", json=_bodies(model)[path], headers=headers)
            error = r.json()["error"]
            answers.append((r.status_code, error["code"], error["message"].replace(model, "<m>")))
        assert answers[0] == answers[1] == (404, "model_not_found", "The model '<m>' does not exist"), path
    for model in (FORBIDDEN, UNKNOWN):
        r = httpx.get(f"{stub_gateway.v1}/models/{model}", headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (404, "model_not_found")
    # The audit record keeps the truth the client is not told.
    denials = [
        rec["event"]
        for rec in stub_gateway.audit_records(200)
        if rec["event"].get("event_type") == "authorization_denial" and rec["event"].get("model") == FORBIDDEN
    ]
    assert len(denials) == 2 and all(
        d["reason"] == "model not allowed" and d["status"] == 404 for d in denials
    )


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/admin/grants"])
def test_deeply_nested_json_is_a_400_without_a_traceback(stub_gateway: Any, path: str) -> None:
    depth = 50_000
    nested = b'{"a":' * depth + b"1" + b"}" * depth
    if path == "/admin/grants":
        body = b'{"role": "x", "pattern": "*", "action": "chat", "extra": ' + nested + b"}"
    else:
        body = b'{"model": "demo-chat", "messages": [], "metadata": ' + nested + b"}"
    headers = {**_token(stub_gateway, "admin"), "content-type": "application/json"}
    r = httpx.post(f"{stub_gateway.base_url}{path}", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert "Traceback" not in stub_gateway.log() and "RecursionError" not in stub_gateway.log()
