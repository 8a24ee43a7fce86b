"""Issue 17 findings 3 and 4 on a real ``strongroom serve``: what the log leaves out, what clients put in.

One gateway keeps content encrypted by default, as HMAC for the ``hmac-kept`` role and not at
all for ``quiet``. Records are read back through ``/audit`` (the gateway owns the log).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration

_CONFIG = """
[audit]
content_default = "encrypt"

[[audit.content_rules]]
mode = "hmac"
roles = ["hmac-kept"]

[[audit.content_rules]]
mode = "none"
roles = ["quiet"]
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, serve: Any) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("records")
    config = tmp / "strongroom.toml"
    config.write_text(_CONFIG)
    with serve(tmp, extra_env={"STRONGROOM_CONFIG": str(config)}) as served:
        served.admin = {"authorization": f"Bearer {served.token('root', 'admin')}"}
        served.compliance = {"authorization": f"Bearer {served.token('cora', 'compliance')}"}
        yield served


def records_of(gw: Any, request_id: str) -> list[dict[str, Any]]:
    """Every record carrying ``request_id``, read through /audit (newest 1,000 are plenty here)."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{gw.base_url}/audit/records", params=params, headers=gw.admin, timeout=30).json()
        out.extend(r for r in page["records"] if r["event"].get("request_id") == request_id)
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def one_record(gw: Any, response: httpx.Response | Any) -> dict[str, Any]:
    found = records_of(gw, response.headers["x-request-id"])
    assert len(found) == 1, (response.headers["x-request-id"], found)
    return found[0]


def chat(gw: Any, *roles: str, user: str | None = None, stream: bool = False) -> tuple[str, str]:
    """(request id, delivered text) of one greedy chat."""
    c = OpenAI(base_url=gw.v1, api_key=gw.token("carol", *roles), max_retries=0, timeout=60)
    extra = {"user": user} if user is not None else {}
    messages = [{"role": "user", "content": "Tell me about the vault"}]
    if stream:
        with c.chat.completions.with_streaming_response.create(
            model="demo-chat", messages=messages, max_tokens=6, temperature=0, stream=True, **extra
        ) as raw:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
            return raw.headers["x-request-id"], text
    raw = c.chat.completions.with_raw_response.create(
        model="demo-chat", messages=messages, max_tokens=6, temperature=0, **extra
    )
    return raw.headers["x-request-id"], raw.parse().choices[0].message.content or ""


def _final_seq(gw: Any, request_id: str) -> int:
    # A stream also has its "stream started" record; the final one holds the content.
    return max(r["seq"] for r in records_of(gw, request_id))


@pytest.mark.parametrize("stream", [False, True])
def test_encrypted_content_reads_back_for_audit_content_holders(gw: Any, stream: bool) -> None:
    request_id, delivered = chat(gw, "analyst", stream=stream)
    seq = _final_seq(gw, request_id)
    view = httpx.get(f"{gw.base_url}/audit/records/{seq}/content", headers=gw.compliance, timeout=30)
    assert view.status_code == 200, view.text
    assert json.loads(view.json()["prompt"]) == [{"role": "user", "content": "Tell me about the vault"}]
    assert view.json()["completion"] == delivered and delivered
    # audit:read alone (admin, auditor) does not read content.
    assert httpx.get(f"{gw.base_url}/audit/records/{seq}/content", headers=gw.admin).status_code == 403
    stored = httpx.get(f"{gw.base_url}/audit/records/{seq}", headers=gw.admin).json()
    assert stored["content"]["mode"] == "encrypt" and "vault" not in json.dumps(stored)


def test_hmac_content_is_checkable_and_none_keeps_nothing(gw: Any) -> None:
    request_id, delivered = chat(gw, "analyst", "hmac-kept")
    seq = _final_seq(gw, request_id)
    match = httpx.post(
        f"{gw.base_url}/audit/records/{seq}/content/match", json={"text": delivered}, headers=gw.compliance
    )
    assert match.status_code == 200 and match.json() == {"prompt": False, "completion": True}
    request_id, _ = chat(gw, "analyst", "quiet")
    seq = _final_seq(gw, request_id)
    assert httpx.get(f"{gw.base_url}/audit/records/{seq}", headers=gw.admin).json().get("content") is None
    assert httpx.get(f"{gw.base_url}/audit/records/{seq}/content", headers=gw.compliance).status_code == 404


def test_a_blocked_prompt_is_kept_for_the_investigation_it_starts(gw: Any) -> None:
    headers = {"authorization": f"Bearer {gw.token('alice', 'analyst')}"}
    secret = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7v9z\n-----END RSA PRIVATE KEY-----"
    messages = [{"role": "user", "content": f"store {secret}"}]
    blocked = httpx.post(
        f"{gw.v1}/chat/completions", json={"model": "demo-chat", "messages": messages}, headers=headers
    )
    assert blocked.status_code == 400
    record = one_record(gw, blocked)
    assert record["event"]["event_type"] == "filter_action" and "PRIVATE KEY" not in json.dumps(record)
    view = httpx.get(f"{gw.base_url}/audit/records/{record['seq']}/content", headers=gw.compliance).json()
    assert json.loads(view["prompt"]) == messages and view["completion"] == ""


def test_the_openai_user_field_is_recorded_capped(gw: Any) -> None:
    request_id, _ = chat(gw, "analyst", user="branch-42/teller-7")
    assert [r["event"]["end_user"] for r in records_of(gw, request_id)] == ["branch-42/teller-7"]
    request_id, _ = chat(gw, "analyst", user="u" * 20_000, stream=True)
    for record in records_of(gw, request_id):
        assert len(record["event"]["end_user"]) < 300 and "+19744 chars" in record["event"]["end_user"]


def test_every_request_gets_exactly_one_record_whatever_answers_it(gw: Any) -> None:
    analyst = {"authorization": f"Bearer {gw.token('alice', 'analyst')}"}
    json_ct = {**gw.admin, "content-type": "application/json"}
    base = gw.base_url
    cases = [
        (httpx.get(f"{base}/no/such/route", headers=analyst), 404),
        (httpx.post(f"{base}/v1/models", headers=analyst), 405),
        (httpx.delete(f"{base}/admin/grants", headers=gw.admin), 405),
        (httpx.post(f"{base}/admin/grants", content=b'{"role": ', headers=json_ct), 400),
        (httpx.post(f"{base}/admin/grants", content=b"[" + b" " * 1_100_000 + b"]", headers=json_ct), 413),
        (httpx.get(f"{base}/v1/models/demo-base", headers=analyst), 404),
        (httpx.get(f"{base}/v1/models", headers=analyst), 200),
        (httpx.get(f"{base}/audit/records", params={"limit": 0}, headers=gw.admin), 400),
        (httpx.get(f"{base}/audit/records/not-a-number", headers=gw.admin), 404),
        (httpx.get(f"{base}/audit/records/99999999", headers=gw.admin), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        record = one_record(gw, response)
        assert record["event"]["status"] == status, record
    denied = one_record(gw, cases[5][0])["event"]
    assert denied["subject"] == "alice" and denied["decision"] == "deny"
    assert one_record(gw, cases[6][0])["event"]["event_type"] == "request"
    # An allowed /audit access is recorded with what the caller got, not a 200 written beforehand.
    assert one_record(gw, cases[7][0])["event"]["event_type"] == "audit_access"
    assert one_record(gw, cases[9][0])["event"]["event_type"] == "audit_access"
    # Probes stay unrecorded: a load balancer asking every second would bury the real records.
    probe = httpx.get(f"{base}/healthz")
    assert probe.status_code == 200 and records_of(gw, probe.headers["x-request-id"]) == []


def test_client_strings_are_capped_and_kept_out_of_reasons(gw: Any) -> None:
    headers = {"authorization": f"Bearer {gw.token('alice', 'analyst')}"}
    secret_role = "user 4111 1111 1111 1111 AKIAIOSFODNN7EXAMPLE"
    bad = httpx.post(
        f"{gw.v1}/chat/completions",
        json={"model": "demo-chat", "messages": [{"role": secret_role, "content": "hi"}]},
        headers=headers,
    )
    assert bad.status_code == 400
    record = json.dumps(one_record(gw, bad))
    assert "4111" not in record and "AKIA" not in record
    huge_model = "m" * 100_000
    missing = httpx.post(
        f"{gw.v1}/chat/completions",
        json={"model": huge_model, "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
    )
    assert missing.status_code == 404
    assert len(json.dumps(one_record(gw, missing))) < 4_000
    forged = httpx.get(f"{gw.base_url}/audit/verify", headers={**gw.admin, "x-request-id": "x" * 60_000})
    assert forged.status_code == 200
    assert forged.headers["x-request-id"] != "x" * 60_000
    assert one_record(gw, forged)["event"]["request_id"] == forged.headers["x-request-id"]


def test_a_role_holding_a_bar_cannot_pose_as_admin_in_role_search(gw: Any) -> None:
    request_id, _ = chat(gw, "analyst", "x|admin|y")
    page = httpx.get(
        f"{gw.base_url}/audit/records", params={"role": "admin", "limit": 1000}, headers=gw.admin
    )
    assert request_id not in {r["event"].get("request_id") for r in page.json()["records"]}
    page = httpx.get(
        f"{gw.base_url}/audit/records", params={"role": "x|admin|y", "limit": 1000}, headers=gw.admin
    )
    assert request_id in {r["event"].get("request_id") for r in page.json()["records"]}


def test_cli_security_operations_go_through_the_running_gateway(gw: Any) -> None:
    identity = f"{_os_user()}@{socket.gethostname()}"
    # The gateway holds the log's writer lock: a record that lands came through its writer socket.
    gw.cli("admin", "grant", "teller", "demo-chat")
    gw.cli("admin", "revoke", "--sub", "mallory", "--before", "now")
    page = httpx.get(
        f"{gw.base_url}/audit/records", params={"event_type": "admin_change", "limit": 1000}, headers=gw.admin
    ).json()
    events = [r["event"] for r in page["records"] if r["event"].get("client_app") == f"cli:{identity}"]
    assert [e["endpoint"] for e in events] == ["policy", "revocation"]
    assert events[0]["subject"] == identity and "teller" in events[0]["detail"]
    assert "mallory" in events[1]["detail"]


def _os_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
