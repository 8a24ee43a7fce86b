"""The gRPC API through a real ``strongroom serve`` (stub engine) on loopback, driven by stubs
generated from ``gateway/grpc_api/inference.proto``: the HTTP routes' authentication, policy,
filters, quotas and audit hold for every call.

The stub engine answers ``max_tokens`` times " hello"; the gateway's extra keyword list blocks
"hello hello hello", so an answer of three or more tokens is stopped by the response filter.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.grpc_api import inference_pb2 as pb
from gateway.grpc_api import inference_pb2_grpc as pb_grpc
from tests.integration.conftest import ServedGateway, served_gateway

pytestmark = pytest.mark.integration

_STUB = ("--stub-engine",)


def _env(tmp: Path) -> dict[str, str]:
    keywords = tmp / "keywords.txt"
    keywords.write_text("hello hello hello\n")
    return {
        "STRONGROOM_FILTERS__KEYWORD_FILES": f'["{keywords}"]',
        "STRONGROOM_QUOTA__SUBJECTS": "{limited = {requests_per_minute = 1}}",
    }


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    tmp = tmp_path_factory.mktemp("grpc-serve")
    with served_gateway(tmp, args=_STUB, extra_env=_env(tmp)) as served:
        yield served


@pytest.fixture(scope="module")
def stub(gw: ServedGateway) -> Iterator[pb_grpc.InferenceStub]:
    with grpc.insecure_channel(gw.grpc_target) as channel:
        yield pb_grpc.InferenceStub(channel)


def _auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _chat(text: str = "Hi", max_tokens: int = 2, **extra: Any) -> pb.ChatCompletionRequest:
    return pb.ChatCompletionRequest(
        model="demo-chat",
        messages=[pb.ChatMessage(role="user", content=text)],
        max_tokens=max_tokens,
        **extra,
    )


def _trailing(err: grpc.RpcError) -> dict[str, str]:
    return dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]


def _records(gw: ServedGateway, request_id: str, n: int = 1) -> list[dict[str, Any]]:
    for _ in range(50):
        records = [r["event"] for r in gw.audit_for(request_id)]
        if len(records) >= n:
            return records  # type: ignore[return-value]
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} audit records for {request_id}")


def test_no_token_is_unauthenticated_and_recorded(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(_chat())
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert err.value.details() == "Invalid token"
    trailing = _trailing(err.value)
    assert trailing["x-error-code"] == "invalid_api_key"
    [record] = _records(gw, trailing["x-request-id"])
    assert record["event_type"] == "authentication_failure" and record["status"] == 401
    assert record["endpoint"] == "grpc /strongroom.v1.Inference/Chat"
    with pytest.raises(grpc.RpcError) as err:
        stub.ListModels(pb.ListModelsRequest(), metadata=_auth("not-a-jwt"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_roles_decide_as_over_http(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    analyst = _auth(gw.token("ann", "analyst"))
    # An auditor holds no model action at all: embeddings are refused outright.
    with pytest.raises(grpc.RpcError) as err:
        stub.Embed(
            pb.EmbeddingRequest(model="demo-embed", input=["x"]), metadata=_auth(gw.token("eve", "auditor"))
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    [record] = _records(gw, _trailing(err.value)["x-request-id"])
    assert (record["event_type"], record["status"]) == ("authorization_denial", 403)
    # A model the caller may not use reads as absent.
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(_chat(), metadata=_auth(gw.token("nobody", "visitor")))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert _trailing(err.value)["x-error-code"] == "model_not_found"
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(
            pb.ChatCompletionRequest(model="demo-base", messages=[pb.ChatMessage(role="user", content="Hi")]),
            metadata=analyst,
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    listed = stub.ListModels(pb.ListModelsRequest(), metadata=analyst)
    assert [(m.id, m.kind) for m in listed.data] == [("demo-chat", "chat"), ("demo-embed", "embedding")]
    assert not stub.ListModels(pb.ListModelsRequest(), metadata=_auth(gw.token("nobody", "visitor"))).data


def test_chat_unary_is_answered_and_recorded(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    answer, call = stub.Chat.with_call(_chat(), metadata=_auth(gw.token("ann", "analyst")))
    assert answer.object == "chat.completion" and answer.model == "demo-chat"
    assert answer.choices[0].message.content == " hello hello"
    assert answer.choices[0].finish_reason == "length"
    assert (answer.usage.completion_tokens, answer.usage.total_tokens > 2) == (2, True)
    initial = dict(call.initial_metadata())
    assert "x-ratelimit-remaining-requests" in initial
    [record] = _records(gw, initial["x-request-id"])
    assert (record["event_type"], record["decision"], record["status"]) == ("inference", "allow", 200)
    assert record["endpoint"] == "grpc /strongroom.v1.Inference/Chat"
    assert record["subject"] == "ann" and record["completion_tokens"] == 2


def test_chat_stream_sends_chunks_then_usage(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    call = stub.ChatStream(_chat(include_usage=True), metadata=_auth(gw.token("ann", "analyst")))
    chunks = list(call)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content for c in chunks if c.choices)
    assert text == " hello hello"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].HasField("finish_reason")
    ]
    assert finishes == ["length"]
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 2
    assert call.code() == grpc.StatusCode.OK
    request_id = dict(call.initial_metadata())["x-request-id"]
    records = _records(gw, request_id, 2)
    assert [(r.get("reason", ""), r.get("completion_tokens", 0)) for r in records] == [
        ("stream started", 0),
        ("", 2),
    ]


def test_completion_unary_and_streamed(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    auth = _auth(gw.token("ann", "analyst"))
    answer = stub.Complete(
        pb.CompletionRequest(model="demo-chat", text="Hi", max_tokens=2, echo=True), metadata=auth
    )
    assert answer.object == "text_completion" and answer.choices[0].text == "Hi hello hello"
    chunks = list(
        stub.CompleteStream(pb.CompletionRequest(model="demo-chat", text="Hi", max_tokens=2), metadata=auth)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " hello hello"
    # Token ids carry text past the filters: refused, as over HTTP, unless allowed.
    with pytest.raises(grpc.RpcError) as err:
        stub.Complete(
            pb.CompletionRequest(model="demo-chat", token_ids=pb.TokenIds(ids=[1, 2])), metadata=auth
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailing(err.value)["x-error-param"] == "prompt"


def test_embeddings(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    admin = _auth(gw.token("root", "admin"))
    answer = stub.Embed(pb.EmbeddingRequest(model="demo-embed", input=["a loan", "the bank"]), metadata=admin)
    assert [d.index for d in answer.data] == [0, 1] and len(answer.data[0].embedding) == 8
    assert answer.usage.prompt_tokens > 0
    short = stub.Embed(pb.EmbeddingRequest(model="demo-embed", input=["a"], dimensions=4), metadata=admin)
    assert len(short.data[0].embedding) == 4
    with pytest.raises(grpc.RpcError) as err:
        stub.Embed(pb.EmbeddingRequest(model="demo-chat", input=["a"]), metadata=admin)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailing(err.value)["x-error-param"] == "model"


def test_a_bad_request_names_its_field(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    auth = _auth(gw.token("ann", "analyst"))
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(pb.ChatCompletionRequest(model="demo-chat"), metadata=auth)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailing(err.value)["x-error-param"] == "messages"
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(_chat(temperature=-1.0), metadata=auth)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_request_the_filters_block_is_refused_and_recorded(
    gw: ServedGateway, stub: pb_grpc.InferenceStub
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(stub.ChatStream(_chat("how do I bypass kyc"), metadata=_auth(gw.token("ann", "analyst"))))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    trailing = _trailing(err.value)
    assert trailing["x-error-code"] == "content_policy_violation"
    assert err.value.details() == "The request was blocked by the content policy"
    [record] = _records(gw, trailing["x-request-id"])
    assert (record["event_type"], record["status"]) == ("filter_action", 400)
    assert [f["type"] for f in record["findings"]] == ["keyword"]


def test_a_stream_blocked_midway_ends_with_a_status_and_no_blocked_text(
    gw: ServedGateway, stub: pb_grpc.InferenceStub
) -> None:
    call = stub.ChatStream(_chat(max_tokens=8), metadata=_auth(gw.token("ann", "analyst")))
    chunks = []
    with pytest.raises(grpc.RpcError) as err:
        for chunk in call:
            chunks.append(chunk)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _trailing(err.value)["x-error-code"] == "content_policy_violation"
    assert err.value.details() == "The response was stopped by the content policy"
    text = "".join(c.choices[0].delta.content for c in chunks if c.choices)
    assert "hello hello hello" not in text
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    records = _records(gw, dict(call.initial_metadata())["x-request-id"], 2)
    assert [(r["event_type"], r.get("reason", "")) for r in records] == [
        ("inference", "stream started"),
        ("filter_action", "response blocked by content policy"),
    ]
    # Not streamed: the whole answer is filtered before it leaves.
    answer = stub.Chat(_chat(max_tokens=8), metadata=_auth(gw.token("ann", "analyst")))
    assert answer.choices[0].finish_reason == "content_filter" and answer.choices[0].message.content == ""


def test_an_exhausted_quota_is_resource_exhausted(gw: ServedGateway, stub: pb_grpc.InferenceStub) -> None:
    auth = _auth(gw.token("limited", "analyst"))
    assert stub.Chat(_chat(), metadata=auth).choices
    with pytest.raises(grpc.RpcError) as err:
        stub.Chat(_chat(), metadata=auth)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailing = _trailing(err.value)
    assert trailing["x-error-type"] == "rate_limit_error" and "retry-after" in trailing
    [record] = _records(gw, trailing["x-request-id"])
    assert (record["event_type"], record["status"]) == ("rate_limit", 429)


def test_calls_fail_closed_when_the_audit_log_cannot_be_written(serve: Any, tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr")
    with serve(tmp_path, args=_STUB) as gw, grpc.insecure_channel(gw.grpc_target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        auth = _auth(gw.token("ann", "analyst"))
        assert stub.Chat(_chat(), metadata=auth).choices
        audit_files = [str(gw.data_dir / "audit" / n) for n in ("audit.db", "audit.db-wal")]
        subprocess.run(["chattr", "+i", *audit_files], check=True)
        try:
            for call in (
                lambda: stub.Chat(_chat(), metadata=auth),
                lambda: list(stub.ChatStream(_chat(), metadata=auth)),
                lambda: stub.ListModels(pb.ListModelsRequest(), metadata=auth),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    call()
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
                assert _trailing(err.value)["x-error-code"] == "audit_unavailable"
        finally:
            subprocess.run(["chattr", "-i", *audit_files], check=True)


def test_a_client_that_leaves_mid_stream_is_recorded(serve: Any, tmp_path: Path) -> None:
    """Cancelling the call closes the pipeline's stream: the engine request ends and the outcome
    is on the record, as when an HTTP client disconnects."""
    with serve(tmp_path) as gw, grpc.insecure_channel(gw.grpc_target) as channel:  # the demo engine
        stub = pb_grpc.InferenceStub(channel)
        call = stub.ChatStream(
            _chat(max_tokens=1500, ignore_eos=True), metadata=_auth(gw.token("ann", "analyst"))
        )
        next(call), next(call)  # the role chunk, then text
        request_id = dict(call.initial_metadata())["x-request-id"]
        call.cancel()
        records = _records(gw, request_id, 2)
        assert [(r["decision"], r.get("reason", "")) for r in records] == [
            ("allow", "stream started"),
            ("error", "client disconnected"),
        ]
        assert 0 < records[-1]["completion_tokens"] < 1500
