"""RequestMiddleware writes the one record of a request nobody recorded, before the answer leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from litestar import Litestar, Request, get
from litestar.exceptions import NotFoundException

from audit.record import AuditContent
from common.audit_event import AuditEvent, Decision, EventType
from gateway.auditor import Auditor, RequestSink
from gateway.request_context import request_context
from gateway.request_middleware import RequestMiddleware
from gateway.telemetry import Telemetry
from gateway.telemetry_config import TelemetryConfig
from tests.audit_doubles import MemorySink


class LogSink(MemorySink):
    """``AuditLog.append``'s shape (content alongside) over the in-memory sink."""

    async def append(self, event: AuditEvent, content: AuditContent | None = None) -> int:
        return await super().append(event)


def _app(sink_: LogSink) -> RequestMiddleware:
    auditor = Auditor(sink_)

    @get("/recorded")
    async def recorded(request: Request[Any, Any, Any]) -> str:
        await auditor.record(
            request_context(request.scope, "/recorded"), EventType.INFERENCE, Decision.ALLOW, status=200
        )
        return "ok"

    @get("/access")
    async def access(request: Request[Any, Any, Any]) -> str:
        sink = RequestSink(sink_, request_context(request.scope))  # type: ignore[arg-type]
        await sink.append_on_answer(
            AuditEvent(event_type=EventType.AUDIT_ACCESS, decision=Decision.ALLOW, status=200)
        )
        raise NotFoundException("no such record")

    @get("/healthz")
    async def healthz() -> str:
        return "ok"

    app = Litestar(route_handlers=[recorded, access, healthz])
    return RequestMiddleware(app, Telemetry.install(TelemetryConfig()), lambda: auditor)


def _get(app: RequestMiddleware, *paths: str) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return [await client.get(path, headers={"x-request-id": "client-chosen"}) for path in paths]

    return asyncio.run(go())


def test_each_request_has_exactly_one_record_with_the_servers_id() -> None:
    sink = LogSink()
    unknown, recorded, probe = _get(_app(sink), "/no/such/route", "/recorded", "/healthz")
    assert (unknown.status_code, recorded.status_code, probe.status_code) == (404, 200, 200)
    by_id = {e.request_id: e for e in sink.events}
    assert len(sink.events) == 2 and set(by_id) == {
        unknown.headers["x-request-id"],
        recorded.headers["x-request-id"],
    }
    refused = by_id[unknown.headers["x-request-id"]]
    assert (refused.event_type, refused.decision, refused.status) == ("request_rejected", "deny", 404)
    assert refused.endpoint == "GET /no/such/route"
    assert by_id[recorded.headers["x-request-id"]].event_type == "inference"  # not recorded twice


def test_a_record_left_for_the_answer_carries_the_status_answered() -> None:
    sink = LogSink()
    [missing] = _get(_app(sink), "/access")
    assert missing.status_code == 404
    [event] = sink.events
    assert (event.event_type, event.decision, event.status) == ("audit_access", "allow", 404)
    assert event.request_id == missing.headers["x-request-id"]


def test_an_answer_that_cannot_be_recorded_becomes_503() -> None:
    sink = LogSink()
    sink.is_available = False
    [unknown] = _get(_app(sink), "/no/such/route")
    assert unknown.status_code == 503 and unknown.json()["error"]["code"] == "audit_unavailable"
    assert unknown.headers["x-request-id"].startswith("req_")
