"""InferenceService over a real engine server (stub backend) on loopback, the packaged policy, real
filters and quotas: every exit, allowed or refused, leaves its audit record first."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvicorn

from common.audit_event import AuditEvent, Decision, EventType
from common.principal import Principal
from engine.serving.client import EngineClient
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
from filters import FilterConfig, FilterPipeline
from gateway.auditor import Auditor
from gateway.batch_stream import open_batch
from gateway.engine_pool import EnginePool
from gateway.errors import (
    BadRequestError,
    ContentPolicyError,
    GatewayError,
    ModelNotFoundError,
    NoEngineError,
)
from gateway.inference import InferenceService
from gateway.openai_types import ChatCompletionRequest, ChatMessageIn, CompletionRequest
from gateway.prompt_batch import split_batch
from gateway.quota import QuotaConfig, QuotaLimits, Quotas
from gateway.request_context import RequestContext
from gateway.shielded import close_lease
from gateway.sse import server_sent_events
from gateway.telemetry import Telemetry
from gateway.telemetry_config import TelemetryConfig
from policies import AccessConfig, Authorizer

pytestmark = pytest.mark.anyio
TOKEN = "inference-test-token"
CARD = "6222 0200 0000 0007"  # UnionPay-shaped, Luhn-valid
BLOCK_CARDS = 'version = 1\ndefault_action = "flag"\non_error = "block"\n[actions]\npayment_card = "block"\n'
ANALYST = Principal(subject="ann", roles=("analyst",), issuer="t")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    yield from _serve(StubEngine())


def _serve(stub: StubEngine) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = EngineServer(stub, TOKEN).app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "engine server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent, content: Any = None, *, served: bool = False) -> int:
        self.events.append(event)
        return len(self.events)


@pytest.fixture
async def service(engine_url: str, tmp_path: Path) -> AsyncIterator[tuple[InferenceService, ListSink]]:
    async for pair in _service(engine_url, tmp_path):
        yield pair


async def _service(engine_url: str, tmp_path: Path) -> AsyncIterator[tuple[InferenceService, ListSink]]:
    policy = tmp_path / "filters.toml"
    policy.write_text(BLOCK_CARDS)
    engines = EnginePool([EngineClient(engine_url, TOKEN)])
    await engines.start()
    sink = ListSink()
    service = InferenceService(
        authorizer=Authorizer.open(AccessConfig(), tmp_path),
        quotas=Quotas(),
        filters=FilterPipeline.from_config(FilterConfig(policy_file=str(policy)), tmp_path),
        auditor=Auditor(sink),
        engines=engines,
        telemetry=Telemetry.install(TelemetryConfig()),
        clock=lambda: 1000.0,
    )
    try:
        yield service, sink
    finally:
        await engines.aclose()


def _ctx(principal: Principal = ANALYST) -> RequestContext:
    return RequestContext(request_id="req_1", endpoint="/v1/chat/completions", principal=principal)


def _chat(text: str, *, model: str = "demo-chat", stream: bool = False) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model=model, messages=[ChatMessageIn(role="user", content=text)], max_tokens=3, stream=stream
    )


async def test_a_chat_is_answered_then_recorded_with_its_usage(
    service: tuple[InferenceService, ListSink],
) -> None:
    inference, sink = service
    answer = await inference.complete(await inference.prepare(_ctx(), "chat", _chat("hi there")))
    body = json.loads(msgspec.json.encode(answer))
    assert body["object"] == "chat.completion" and body["created"] == 1000
    assert body["choices"][0]["message"]["content"] == " hello hello hello"
    assert body["usage"]["completion_tokens"] == 3
    [record] = sink.events
    assert (record.event_type, record.decision, record.status, record.subject) == (
        EventType.INFERENCE,
        Decision.ALLOW,
        200,
        "ann",
    )
    assert record.completion_tokens == 3 and record.prompt_tokens == body["usage"]["prompt_tokens"]
    assert record.model_manifest == ""  # plaintext, unquantized: nothing to name


async def test_the_record_names_the_quantization_served(tmp_path: Path) -> None:
    # Weights and KV cache quantized: the audit record's model manifest says so (issue 23).
    for url in _serve(StubEngine(quantization="fp8", kv_cache_dtype="float8_e4m3fn")):
        async for inference, sink in _service(url, tmp_path):
            await inference.complete(await inference.prepare(_ctx(), "chat", _chat("hi there")))
            [record] = sink.events
            assert record.model_manifest == "weights=fp8 kv=fp8"


async def test_a_model_the_caller_may_not_use_reads_as_absent(
    service: tuple[InferenceService, ListSink],
) -> None:
    inference, sink = service
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        await inference.prepare(_ctx(), "chat", _chat("hi", model="demo-base"))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        await inference.prepare(_ctx(), "chat", _chat("hi", model="no-such-model"))
    denial, absent = sink.events
    assert (denial.event_type, denial.status, denial.reason) == (
        EventType.AUTHORIZATION_DENIAL,
        404,
        "model not allowed",
    )
    assert absent.event_type == EventType.AUTHORIZATION_DENIAL and absent.reason == "model not allowed"


async def test_refusals_before_the_engine_are_recorded(service: tuple[InferenceService, ListSink]) -> None:
    inference, sink = service
    admin = Principal(subject="root", roles=("admin",), issuer="t")
    with pytest.raises(ContentPolicyError):
        await inference.prepare(_ctx(), "chat", _chat(f"my card is {CARD}"))
    with pytest.raises(BadRequestError, match="token-id prompts are disabled"):
        await inference.prepare(
            _ctx(admin), "completions", CompletionRequest(model="demo-base", prompt=[1, 2])
        )
    with pytest.raises(BadRequestError, match="messages must not be empty"):
        await inference.prepare(_ctx(), "chat", ChatCompletionRequest(model="demo-chat", messages=[]))
    assert [(e.event_type, e.status) for e in sink.events] == [
        (EventType.FILTER_ACTION, 400),
        (EventType.REQUEST_REJECTED, 400),
        (EventType.REQUEST_REJECTED, 400),
    ]
    assert CARD not in repr(sink.events)


async def test_a_stream_records_its_start_then_its_end_before_done(
    service: tuple[InferenceService, ListSink],
) -> None:
    inference, sink = service
    prep = await inference.prepare(_ctx(), "chat", _chat("hi", stream=True))
    stream = await inference.open_stream(prep)
    assert [e.reason for e in sink.events] == ["stream started"]
    sent = b"".join([chunk async for chunk in server_sent_events(stream)])
    chunks = [event + b"\n\n" for event in sent.split(b"\n\n") if event]
    assert chunks[-1] == b"data: [DONE]\n\n"
    text = "".join(
        (json.loads(c.removeprefix(b"data: "))["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for c in chunks[:-1]
    )
    assert text == " hello hello hello"
    assert [(e.event_type, e.reason, e.completion_tokens) for e in sink.events] == [
        (EventType.INFERENCE, "stream started", 0),
        (EventType.INFERENCE, "", 3),
    ]


async def test_a_streamed_batch_refused_at_its_second_prompt_frees_the_first_prompts_quota(
    service: tuple[InferenceService, ListSink],
) -> None:
    inference, sink = service
    one_at_a_time = QuotaLimits(
        requests_per_minute=600, tokens_per_minute=1_000_000, concurrent_requests=1, max_tokens_ceiling=32_768
    )
    inference.quotas = Quotas(QuotaConfig(default=one_at_a_time))
    body = CompletionRequest(model="demo-chat", prompt=["one", "two"], max_tokens=2, stream=True)
    parts = split_batch(body)
    assert parts is not None
    with pytest.raises(GatewayError) as err:  # each prompt holds a slot: the second has none
        await open_batch(inference, _ctx(), parts)
    assert err.value.status_code == 429
    # The first prompt's slot was given back: one prompt alone is served.
    stream, _ = await open_batch(inference, _ctx(), parts[:1])
    assert b"".join([c async for c in server_sent_events(stream)]).endswith(b"data: [DONE]\n\n")
    assert [e.status for e in sink.events] == [429, 200, 200]


async def test_a_streamed_batch_refused_at_the_engine_closes_and_records_the_streams_already_open(
    service: tuple[InferenceService, ListSink], monkeypatch: pytest.MonkeyPatch
) -> None:
    inference, sink = service
    real_open = inference.open_stream
    opened: list[AsyncGenerator[Any, None]] = []

    async def open_once(prep: Any) -> AsyncGenerator[Any, None]:
        if opened:  # the second prompt: the engine is full, as its 429 would say
            await close_lease(prep.lease, 0)
            raise await inference.reject(prep.ctx, NoEngineError("engine overloaded"))
        opened.append(await real_open(prep))
        return opened[0]

    monkeypatch.setattr(inference, "open_stream", open_once)
    body = CompletionRequest(model="demo-chat", prompt=["one", "two"], max_tokens=2, stream=True)
    parts = split_batch(body)
    assert parts is not None
    with pytest.raises(NoEngineError):
        await open_batch(inference, _ctx(), parts)
    first, refused, closed = sink.events
    assert (first.reason, refused.status) == ("stream started", 503)
    assert (closed.reason, closed.decision) == ("batch refused: another prompt was refused", Decision.ERROR)
