"""/v1/embeddings through the real gateway and engine (demo-embed), driven by the official openai SDK."""

from __future__ import annotations

import base64
import json
import math
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.conftest import ServedGateway, served_gateway

pytestmark = pytest.mark.integration

TOKENS_PER_WINDOW = 400


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    env = {
        "STRONGROOM_QUOTA__DEFAULT": (
            f"{{requests_per_minute = 10000, tokens_per_minute = {TOKENS_PER_WINDOW}, "
            "concurrent_requests = 64, max_tokens_ceiling = 1000}"
        ),
        "STRONGROOM_QUOTA__WINDOW_S": "86400",  # one window for the whole module
    }
    with served_gateway(tmp_path_factory.mktemp("embed-serve"), extra_env=env) as served:
        yield served


def client(gw: ServedGateway, sub: str, role: str = "admin") -> OpenAI:
    """The default policy grants ``embedding`` to admins (every model) and analysts (demo-embed)."""
    return OpenAI(base_url=gw.v1, api_key=gw.token(sub, role), max_retries=0, timeout=60)


def audited(gw: ServedGateway, request_id: str) -> list[dict[str, Any]]:
    for _ in range(20):
        records = gw.audit_for(request_id)
        if records:
            return records
        time.sleep(0.1)
    raise AssertionError(f"no audit record for {request_id}")


def test_string_list_base64_and_dimensions(gw: ServedGateway) -> None:
    c = client(gw, "ann")
    one = c.embeddings.create(model="demo-embed", input="the bank", encoding_format="float")
    assert one.object == "list" and one.model == "demo-embed" and len(one.data) == 1
    vector = one.data[0].embedding
    assert len(vector) == 64 and math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-5)
    assert one.usage.prompt_tokens == one.usage.total_tokens > 0

    many = c.embeddings.create(model="demo-embed", input=["a loan", "the bank", "x"], encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2]
    assert many.data[1].embedding == vector  # batching does not change a vector
    assert many.data[0].embedding != vector

    raw = c.embeddings.create(model="demo-embed", input="the bank", encoding_format="base64")
    packed = base64.b64decode(raw.data[0].embedding)  # type: ignore[arg-type]
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == vector
    default = c.embeddings.create(model="demo-embed", input="the bank")  # the SDK asks for base64
    assert default.data[0].embedding == vector

    short = c.embeddings.create(model="demo-embed", input="the bank", dimensions=16, encoding_format="float")
    head = vector[:16]
    norm = math.sqrt(math.fsum(v * v for v in head))
    assert short.data[0].embedding == pytest.approx([v / norm for v in head], abs=1e-6)
    with pytest.raises(openai.BadRequestError) as err:
        c.embeddings.create(model="demo-embed", input="x", dimensions=65)
    assert err.value.body["param"] == "dimensions"  # type: ignore[index]


def test_kinds_answer_with_clear_400s_and_models_show_them(gw: ServedGateway) -> None:
    admin = client(gw, "root")  # may use every model for every action
    kinds = {m.id: m.model_extra["kind"] for m in admin.models.list()}  # type: ignore[index]
    assert kinds == {"demo-base": "chat", "demo-chat": "chat", "demo-embed": "embedding"}
    with pytest.raises(openai.BadRequestError) as err:
        admin.embeddings.create(model="demo-chat", input="x")
    assert err.value.body["param"] == "model" and "not an embedding model" in err.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        admin.chat.completions.create(model="demo-embed", messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["param"] == "model" and "embedding model" in err.value.body["message"]  # type: ignore[index]
    analyst = client(gw, "ann", role="analyst")
    assert {m.id for m in analyst.models.list()} == {"demo-chat", "demo-embed"}  # none on demo-base
    with pytest.raises(openai.BadRequestError):
        admin.embeddings.create(model="demo-embed", input=["ok", ""])
    with pytest.raises(openai.BadRequestError) as err:
        admin.embeddings.create(model="demo-embed", input=[[1, 2, 3]])
    assert "token-id inputs are disabled" in err.value.body["message"]  # type: ignore[index]


def test_a_role_without_embedding_gets_403_and_is_audited(gw: ServedGateway) -> None:
    analyst = client(gw, "ann", role="analyst")  # embeds with demo-embed, as a RAG pipeline does
    assert len(analyst.embeddings.create(model="demo-embed", input="x", encoding_format="float").data) == 1
    c = client(gw, "aud", role="auditor")  # reads the audit log; no model action at all
    with pytest.raises(openai.PermissionDeniedError) as err:
        c.embeddings.create(model="demo-embed", input="x")
    [record] = audited(gw, err.value.response.headers["x-request-id"])
    event = record["event"]
    assert event["event_type"] == "authorization_denial" and event["status"] == 403
    assert event["decision"] == "deny"


def test_filters_block_or_redact_inputs_and_record_findings(gw: ServedGateway) -> None:
    c = client(gw, "ann")
    secret = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7v9z\n-----END RSA PRIVATE KEY-----"
    with pytest.raises(openai.BadRequestError) as err:
        c.embeddings.create(model="demo-embed", input=["harmless", f"store {secret}"])
    assert err.value.body["code"] == "content_policy_violation"  # type: ignore[index]
    [record] = audited(gw, err.value.response.headers["x-request-id"])
    assert record["event"]["event_type"] == "filter_action" and record["event"]["decision"] == "deny"
    assert [f["type"] for f in record["event"]["findings"]] == ["secret"]
    assert "PRIVATE KEY" not in json.dumps(record)

    raw = c.embeddings.with_raw_response.create(
        model="demo-embed", input=["harmless", "mail me at zhang.san@example.com"], encoding_format="float"
    )
    assert len(raw.parse().data) == 2
    [done] = audited(gw, raw.headers["x-request-id"])
    assert {"type": "email", "count": 1, "action": "redact", "direction": "request"} in done["event"][
        "findings"
    ]
    assert "zhang.san" not in json.dumps(done)


def test_quota_counts_input_tokens_and_the_audit_record_has_them(gw: ServedGateway) -> None:
    c = client(gw, "quinn")
    first = c.embeddings.with_raw_response.create(
        model="demo-embed", input="the bank", encoding_format="float"
    )
    remaining = int(first.headers["x-ratelimit-remaining-tokens"])
    texts = ["a loan for the bank", "interest rates"]
    second = c.embeddings.with_raw_response.create(model="demo-embed", input=texts, encoding_format="float")
    used = second.parse().usage.prompt_tokens
    assert used > len(texts)  # tokens, not inputs
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == remaining - used
    [record] = audited(gw, second.headers["x-request-id"])
    event = record["event"]
    assert event["event_type"] == "inference" and event["decision"] == "allow"
    assert event["endpoint"] == "/v1/embeddings" and event["model"] == "demo-embed"
    assert event["prompt_tokens"] == used and event["subject"] == "quinn"
    # Over the window's tokens: 429 before the engine runs.
    big = ["the bank " * 30] * 4
    with pytest.raises(openai.RateLimitError):
        for _ in range(10):
            c.embeddings.create(model="demo-embed", input=big)


def test_token_id_inputs_where_allowed(tmp_path: Path) -> None:
    env = {"STRONGROOM_SERVER__ALLOW_TOKEN_ID_PROMPTS": "true"}
    with served_gateway(tmp_path, extra_env=env, args=("--stub-engine",)) as stub:
        c = client(stub, "ann")
        out = c.embeddings.create(model="demo-embed", input=[[1, 2, 3], [4]], encoding_format="float")
        assert [len(d.embedding) for d in out.data] == [8, 8] and out.usage.prompt_tokens == 4
        answer = httpx.post(
            f"{stub.v1}/embeddings",
            json={"model": "demo-embed", "input": [1, 2], "encoding_format": "float"},
            headers={"authorization": f"Bearer {stub.token('ann', 'admin')}"},
        )
        assert answer.status_code == 200 and answer.json()["usage"]["prompt_tokens"] == 2
        unknown = httpx.post(
            f"{stub.v1}/embeddings",
            json={"model": "demo-embed", "input": "x", "truncate": "END"},
            headers={"authorization": f"Bearer {stub.token('ann', 'admin')}"},
        )
        assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "truncate"
