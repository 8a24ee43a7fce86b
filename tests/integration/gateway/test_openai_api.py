"""The real server, driven by the official openai client: the foundation's end-to-end contract."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration


_opened: list[OpenAI] = []


def client(gateway: Any, token: str) -> OpenAI:
    sdk = OpenAI(base_url=gateway.v1, api_key=token, max_retries=0, timeout=60)
    _opened.append(sdk)
    return sdk


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """A test's clients close when it ends. Left to the garbage collector, their sockets warn
    (ResourceWarning: an error here) in whichever later test the collection happens to run."""
    yield
    while _opened:
        _opened.pop().close()


def audited(gateway: Any, request_id: str) -> list[dict[str, Any]]:
    for _ in range(20):
        records = gateway.audit_for(request_id)
        if records:
            return records
        time.sleep(0.1)
    raise AssertionError(f"no audit record for {request_id}")


def test_chat_completion_non_stream_is_served_and_audited(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    raw = c.chat.completions.with_raw_response.create(
        model="demo-chat", messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0
    )
    chat = raw.parse()
    assert chat.object == "chat.completion"
    assert chat.choices[0].finish_reason in ("length", "stop")
    assert 1 <= chat.usage.completion_tokens <= 8
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    request_id = raw.headers["x-request-id"]
    [record] = audited(gateway, request_id)
    event = record["event"]
    assert event["event_type"] == "inference" and event["decision"] == "allow"
    assert event["subject"] == "alice" and event["model"] == "demo-chat"
    assert event["completion_tokens"] == chat.usage.completion_tokens
    assert "Hello" not in str(record)  # no prompt text in the audit record by default


def test_greedy_is_deterministic(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    texts = {
        c.completions.create(model="demo-chat", prompt="The bank", max_tokens=12, temperature=0)
        .choices[0]
        .text
        for _ in range(2)
    }
    assert len(texts) == 1


def test_chat_stream_yields_chunks_and_usage(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    stream = c.chat.completions.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=300,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    content_chunks = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(content_chunks) >= 2, "a 300-token answer arrives in several chunks"
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 300
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    plain = c.chat.completions.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=300,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert streamed == plain.choices[0].message.content


def test_completions_stream_and_non_stream(gateway: Any) -> None:
    # A plain answer's text is decoded once at its end, a streamed one token by token: the same text.
    c = client(gateway, gateway.token("alice", "analyst"))
    done = c.completions.create(model="demo-chat", prompt="Hello", max_tokens=40, temperature=0)
    assert done.object == "text_completion" and done.usage is not None
    pieces = [
        ch.choices[0].text
        for ch in c.completions.create(
            model="demo-chat", prompt="Hello", max_tokens=40, temperature=0, stream=True
        )
        if ch.choices
    ]
    assert len(pieces) > 1 and "".join(pieces) == done.choices[0].text


def test_models_lists_only_what_the_role_may_use(gateway: Any) -> None:
    analyst = client(gateway, gateway.token("alice", "analyst"))
    admin = client(gateway, gateway.token("root", "admin"))
    # The default policy: chat and completions on demo-chat, embeddings with demo-embed; not demo-base.
    assert [m.id for m in analyst.models.list()] == ["demo-chat", "demo-embed"]
    assert sorted(m.id for m in admin.models.list()) == ["demo-base", "demo-chat", "demo-embed"]
    assert analyst.models.retrieve("demo-chat").id == "demo-chat"
    with pytest.raises(openai.NotFoundError):
        analyst.models.retrieve("demo-base")  # forbidden reads as absent


def test_missing_and_tampered_tokens_are_401_and_audited(gateway: Any) -> None:
    good = gateway.token("alice", "analyst")
    head, payload, sig = good.split(".")
    tampered = ".".join([head, payload[:-4] + ("AAAA" if payload[-4:] != "AAAA" else "BBBB"), sig])
    bare = httpx.post(f"{gateway.v1}/chat/completions", json={"model": "demo-chat", "messages": []})
    assert bare.status_code == 401 and bare.json()["error"]["message"] == "Invalid token"
    assert (
        audited(gateway, bare.headers["x-request-id"])[0]["event"]["event_type"] == "authentication_failure"
    )
    for token in ("not-a-jwt", tampered):
        with pytest.raises(openai.AuthenticationError) as err:
            client(gateway, token).chat.completions.create(
                model="demo-chat", messages=[{"role": "user", "content": "hi"}]
            )
        assert err.value.status_code == 401
        assert err.value.body["message"] == "Invalid token"  # type: ignore[index]
        [record] = audited(gateway, err.value.response.headers["x-request-id"])
        assert record["event"]["event_type"] == "authentication_failure"
        assert record["event"]["reason"]  # the precise cause is kept for auditors


def test_forbidden_model_is_404_and_audited_as_a_denial(gateway: Any) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(gateway, gateway.token("alice", "analyst")).chat.completions.create(
            model="demo-base", messages=[{"role": "user", "content": "hi"}]
        )
    [record] = audited(gateway, err.value.response.headers["x-request-id"])
    assert record["event"]["event_type"] == "authorization_denial"
    assert record["event"]["model"] == "demo-base"


def test_unknown_model_is_404_and_audited(gateway: Any) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(gateway, gateway.token("alice", "analyst")).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert err.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert audited(gateway, err.value.response.headers["x-request-id"])[0]["event"]["status"] == 404


def test_malformed_json_oversized_body_and_bad_fields(gateway: Any) -> None:
    headers = {
        "authorization": f"Bearer {gateway.token('alice', 'analyst')}",
        "content-type": "application/json",
    }
    url = f"{gateway.v1}/chat/completions"
    bad = httpx.post(url, content=b'{"model": "demo-chat", "messages": [', headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    wrong = httpx.post(url, json={"model": "demo-chat", "messages": "hi"}, headers=headers)
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages"
    huge = httpx.post(url, content=b"{" + b" " * 2_000_000 + b"}", headers=headers)
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    for resp, status in ((bad, 400), (wrong, 400), (huge, 413)):
        [record] = audited(gateway, resp.headers["x-request-id"])
        assert record["event"]["status"] == status and record["event"]["decision"] == "deny"


def _leave_after_one_chunk(gateway: Any, prompt: str | list[str], num_records: int) -> list[dict[str, Any]]:
    """Stream ``prompt``, read one chunk, leave; wait until the engine is idle and the
    ``client disconnected`` records are written, and return them."""
    admin = {"authorization": f"Bearer {gateway.token('root', 'admin')}"}
    c = client(gateway, gateway.token("alice", "analyst"))
    raw = c.completions.with_raw_response.create(
        model="demo-chat", prompt=prompt, max_tokens=1800, stream=True, extra_body={"ignore_eos": True}
    )
    request_id = raw.headers["x-request-id"]
    stream = raw.parse()
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        engines = httpx.get(f"{gateway.base_url}/admin/engines", headers=admin).json()["engines"]
        if engines[0]["in_flight"] == 0 and engines[0]["stats"].get("running", 0) == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"generation still running after disconnect: {engines}")

    def closing() -> list[dict[str, Any]]:
        records = gateway.audit_for(request_id)
        return [r["event"] for r in records if r["event"].get("reason") == "client disconnected"]

    deadline = time.monotonic() + 5
    while len(closing()) < num_records:
        assert time.monotonic() < deadline, gateway.audit_for(request_id)
        time.sleep(0.1)
    return closing()


def test_client_disconnect_aborts_generation(gateway: Any) -> None:
    closing = _leave_after_one_chunk(gateway, "Hello", 1)
    assert closing[0]["decision"] == "error" and 1 <= closing[0]["completion_tokens"] < 1800


def test_client_disconnect_aborts_every_prompt_of_a_streamed_batch(gateway: Any) -> None:
    closing = _leave_after_one_chunk(gateway, ["Hello", "Goodbye", "Again"], 3)
    assert len(closing) == 3  # one record per prompt
    assert all(r["decision"] == "error" and r["completion_tokens"] < 1800 for r in closing)


def test_health_ready_metrics_and_request_ids(gateway: Any) -> None:
    assert httpx.get(f"{gateway.base_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.base_url}/readyz").json()
    # unauthenticated: no model names
    assert ready == {"ready": True, "models": 3, "engine": True, "audit": True, "redis": None}
    metrics = httpx.get(f"{gateway.base_url}/metrics")
    assert metrics.status_code == 200 and "strongroom_request_duration" in metrics.text
    # One Content-Type value (it used to carry "charset=utf-8" twice).
    [content_type] = metrics.headers.get_list("content-type")
    assert content_type.startswith("text/plain") and content_type.count("charset") == 1, content_type
    # The engines' scheduler and KV-pool state under vLLM's names, per model and engine instance.
    text = metrics.text
    for model in ("demo-chat", "demo-base"):
        assert any(
            line.startswith('vllm:num_requests_running{engine="engine-') and f'model_name="{model}"' in line
            for line in text.splitlines()
        ), text
    assert "# TYPE vllm:num_requests_waiting gauge" in text
    assert 0.0 <= _series(text, "vllm:kv_cache_usage_perc") <= 1.0
    assert "# TYPE vllm:num_preemptions_total counter" in text and "vllm:prefix_cache_queries_total{" in text
    ids = {httpx.get(f"{gateway.base_url}/healthz").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3


def _series(metrics_text: str, name: str, **labels: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_request_and_token_counters_count_what_was_served(gateway: Any) -> None:
    before = httpx.get(f"{gateway.base_url}/metrics").text
    done = client(gateway, gateway.token("alice", "analyst")).chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "count me"}], max_tokens=3
    )
    after = httpx.get(f"{gateway.base_url}/metrics").text
    assert done.usage is not None

    def added(name: str, **labels: str) -> float:
        return _series(after, name, **labels) - _series(before, name, **labels)

    assert added("strongroom_tokens_total", kind="prompt", model="demo-chat") == done.usage.prompt_tokens
    assert added("strongroom_tokens_total", kind="completion", model="demo-chat") == (
        done.usage.completion_tokens
    )
    assert added("strongroom_requests_total", route="/v1/chat/completions", status="200") == 1
    assert "# TYPE strongroom_requests_total counter" in after


def _gauge(metrics_text: str, name: str) -> float:
    (line,) = [x for x in metrics_text.splitlines() if x.startswith(name + "{") or x.startswith(name + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_in_flight_gauge_counts_a_stream_while_it_runs(gateway: Any) -> None:
    # The HorizontalPodAutoscaler of deploy/helm scales the gateways on this gauge.
    name = "strongroom_requests_in_flight"
    stream = client(gateway, gateway.token("alice", "analyst")).chat.completions.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "go on"}],
        max_tokens=1500,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    next(iter(stream))
    during = _gauge(httpx.get(f"{gateway.base_url}/metrics").text, name)
    stream.close()
    assert during >= 1
    deadline = time.monotonic() + 10
    while _gauge(httpx.get(f"{gateway.base_url}/metrics").text, name) != 0:
        assert time.monotonic() < deadline, "the closed stream is still counted"
        time.sleep(0.05)


def test_each_request_has_its_own_trace_id_in_the_audit_record(gateway: Any) -> None:
    # No OTLP endpoint: spans are not sampled, but the trace ids still correlate the records.
    c = client(gateway, gateway.token("alice", "analyst"))
    trace_ids = set()
    for _ in range(2):
        raw = c.completions.with_raw_response.create(model="demo-chat", prompt="hi", max_tokens=1)
        [record] = audited(gateway, raw.headers["x-request-id"])
        trace_ids.add(record["event"]["trace_id"])
    assert len(trace_ids) == 2
    assert all(len(t) == 32 and int(t, 16) != 0 for t in trace_ids)


def test_request_filters_block_and_redact_and_record_findings(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    secret = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7v9z\n-----END RSA PRIVATE KEY-----"
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model="demo-chat", messages=[{"role": "user", "content": f"store {secret}"}]
        )
    assert err.value.body["code"] == "content_policy_violation"  # type: ignore[index]
    [record] = audited(gateway, err.value.response.headers["x-request-id"])
    assert record["event"]["event_type"] == "filter_action" and record["event"]["decision"] == "deny"
    assert [f["type"] for f in record["event"]["findings"]] == ["secret"]
    assert "PRIVATE KEY" not in json.dumps(record)

    raw = c.chat.completions.with_raw_response.create(
        model="demo-chat",
        messages=[{"role": "user", "content": "mail me at zhang.san@example.com please"}],
        max_tokens=2,
    )
    assert raw.parse().choices[0].finish_reason in ("length", "stop")
    [done] = audited(gateway, raw.headers["x-request-id"])
    assert {"type": "email", "count": 1, "action": "redact", "direction": "request"} in done["event"][
        "findings"
    ]
    assert "zhang.san" not in json.dumps(done)


def test_request_filters_see_evasions_across_roles(gateway: Any) -> None:
    """Issue 18: a card split between the system and the user message, written with dots and a
    U+034F, and a keyword with a Cyrillic і split over two user turns, are found."""
    c = client(gateway, gateway.token("alice", "analyst"))
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model="demo-chat",
            messages=[
                {"role": "system", "content": "Card on file: 4539.1488\u034f"},
                {"role": "user", "content": "0343-6467. Now explain the \u0456nsider"},
                {"role": "user", "content": "trading tip, please."},
            ],
        )
    assert err.value.body["code"] == "content_policy_violation"  # type: ignore[index]
    [record] = audited(gateway, err.value.response.headers["x-request-id"])
    assert {f["type"] for f in record["event"]["findings"]} == {"keyword", "payment_card"}
    assert "1488" not in json.dumps(record) and "nsider" not in json.dumps(record)


def test_stream_refusals_are_http_errors_not_sse_events(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model="demo-chat", prompt="Hello there " * 3000, max_tokens=4, stream=True)
    assert err.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    [record] = audited(gateway, err.value.response.headers["x-request-id"])
    assert record["event"]["status"] == 400


def test_invalid_sampling_parameters_are_400_and_audited(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="demo-chat", messages=[{"role": "user", "content": "hi"}], top_p=2)
    assert err.value.body["param"] == "top_p"  # type: ignore[index]
    assert audited(gateway, err.value.response.headers["x-request-id"])[0]["event"]["status"] == 400


def test_token_id_prompts_are_refused_by_default(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model="demo-chat", prompt=[1, 2, 3], max_tokens=2)
    assert "token-id prompts" in err.value.body["message"]  # type: ignore[index]
    assert audited(gateway, err.value.response.headers["x-request-id"])[0]["event"]["decision"] == "deny"


def test_non_streamed_request_is_aborted_when_the_client_leaves(gateway: Any) -> None:
    admin = {"authorization": f"Bearer {gateway.token('root', 'admin')}"}
    body = {"model": "demo-chat", "prompt": "Hello", "max_tokens": 1900, "ignore_eos": True}
    headers = {"authorization": f"Bearer {gateway.token('alice', 'analyst')}"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway.v1}/completions", json=body, headers=headers, timeout=httpx.Timeout(0.5, connect=5)
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        [engine] = httpx.get(f"{gateway.base_url}/admin/engines", headers=admin).json()["engines"]
        if engine["in_flight"] == 0 and engine["stats"].get("running", 0) == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the engine kept generating for a client that left: {engine}")
    records = [r["event"] for r in gateway.audit_records(50) if r["event"].get("status") == 499]
    assert records and records[-1]["reason"] == "client disconnected"


def test_token_latencies_are_on_metrics_under_vllms_names(gateway: Any) -> None:
    c = client(gateway, gateway.token("alice", "analyst"))

    def e2e_count(text: str) -> float:
        return _series(text, "vllm:e2e_request_latency_seconds_count", model_name="demo-chat")

    # An earlier test's request can still be finishing (its latencies recorded as it ends): start
    # from figures that held still for a moment, and read the end once both requests are in.
    before = httpx.get(f"{gateway.base_url}/metrics").text
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.3)
        again = httpx.get(f"{gateway.base_url}/metrics").text
        if e2e_count(again) == e2e_count(before):
            break
        before = again

    def added(name: str) -> float:
        return _series(after, name, model_name="demo-chat") - _series(before, name, model_name="demo-chat")

    def read_once_counted(num_requests: int) -> str:
        """/metrics once the last request's end is counted (recorded as its stream ends)."""
        text, until = httpx.get(f"{gateway.base_url}/metrics").text, time.monotonic() + 10
        while e2e_count(text) - e2e_count(before) < num_requests and time.monotonic() < until:
            time.sleep(0.05)
            text = httpx.get(f"{gateway.base_url}/metrics").text
        return text

    # An inter-token latency is observed per frame after the first, as the client receives them.
    # A reader that fell behind takes the engine's waiting frames merged into one (EngineLink),
    # so on a loaded machine all six tokens can arrive in one frame, which has none: up to five
    # streams, until one came in several frames.
    num_streams = 0
    while num_streams < 5:
        stream = c.completions.create(
            model="demo-chat", prompt="tick", max_tokens=6, stream=True, extra_body={"ignore_eos": True}
        )
        assert sum(1 for _ in stream) >= 1
        num_streams += 1
        after = read_once_counted(num_streams)
        if added("vllm:inter_token_latency_seconds_count") >= 1:
            break
    c.completions.create(model="demo-chat", prompt="tock", max_tokens=3)
    after = read_once_counted(num_streams + 1)

    assert added("vllm:time_to_first_token_seconds_count") == num_streams  # streamed answers only
    assert 1 <= added("vllm:inter_token_latency_seconds_count") <= 5 * num_streams
    assert added("vllm:e2e_request_latency_seconds_count") == num_streams + 1
    assert added("vllm:time_per_output_token_seconds_count") == num_streams
