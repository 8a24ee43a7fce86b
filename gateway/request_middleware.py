"""Outermost ASGI layer: request id, trace span, duration and the audit record of every request.

It stamps ``x-request-id`` on every response, errors included, with the same id the audit
record carries, and ends the span only when the last body byte (of a stream too) is sent.

Exactly one record per request: the handlers record their decisions through the request's
``RequestContext``; when the answer starts and none did (the framework refused the request, a
metadata read, an error before any decision), this layer writes it, before the first byte
leaves. A handler may also leave its record to be written then (``RequestSink.append_on_answer``:
an allowed ``/audit`` access), so it carries the status the caller gets. If that record cannot be
written the answer becomes the audit-unavailable 503. Only the probes' own answers (GET /healthz,
/readyz, /metrics: 200 or 503) and the console's static files go unrecorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from gateway.auditor import Auditor
from gateway.errors import AuditUnavailable, GatewayError, response_parts
from gateway.request_context import RequestContext, new_request_id
from gateway.telemetry import Telemetry

__all__ = ["RequestMiddleware"]

ASGIApp = Any


class RequestMiddleware:
    def __init__(
        self, app: ASGIApp, telemetry: Telemetry, auditor: Callable[[], Auditor | None] = lambda: None
    ) -> None:
        self.app = app
        self.telemetry = telemetry
        self._auditor = auditor

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        path = scope.get("path", "")
        started = time.perf_counter()
        status = 500
        span = self.telemetry.tracer.start_span(
            f"{scope.get('method', '')} {path}",
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": scope.get("method", ""),
                "url.path": path,
                "strongroom.request_id": request_id,
            },
        )
        ctx = trace.set_span_in_context(span)
        trace_id = format(span.get_span_context().trace_id, "032x")
        scope["state"]["trace_id"] = trace_id
        scope["state"]["otel_context"] = ctx
        client = scope.get("client")
        request_ctx = scope["state"]["ctx"] = RequestContext(
            request_id=request_id,
            trace_id=trace_id,
            endpoint=f"{scope.get('method', '')} {path}",
            client_ip=client[0] if client else "",
            has_middleware=True,
        )
        is_replaced = False

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status, is_replaced
            if is_replaced:
                return
            if message["type"] == "http.response.start":
                status = message["status"]
                if not await self._is_recorded(request_ctx, scope.get("method", ""), path, status):
                    is_replaced, status = True, AuditUnavailable.status_code
                    message, body = _audit_unavailable()
                    await send(
                        {**message, "headers": [*message["headers"], (b"x-request-id", request_id.encode())]}
                    )
                    await send(body)
                    return
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
            route = _route_label(path)
            self.telemetry.request_duration.record(
                time.perf_counter() - started, {"route": route, "status": status}
            )
            self.telemetry.requests.add(1, {"route": route, "status": status})

    async def _is_recorded(self, ctx: RequestContext, method: str, path: str, status: int) -> bool:
        """True once the request has its record (writing it if needed); False if it cannot."""
        if ctx.is_audit_down or (
            ctx.on_answer is None and (ctx.num_records or _is_probe(method, path, status))
        ):
            return True
        auditor = self._auditor()
        if auditor is None:  # no services (an app under test without them)
            return True
        try:
            await auditor.record_answer(ctx, status)
        except GatewayError:
            return False
        return True


def _is_probe(method: str, path: str, status: int) -> bool:
    # Load balancers and scrapers ask every few seconds, browsers fetch the console's scripts and
    # styles with every page; a record each would bury the real ones.
    if method not in ("GET", "HEAD"):
        return False
    return (path in _PROBES and status in (200, 503)) or (
        path.startswith("/console/static/") and status in (200, 304)
    )


_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


def _audit_unavailable() -> tuple[dict[str, Any], dict[str, Any]]:
    status, body, _ = response_parts(
        AuditUnavailable("the audit log is unavailable; the request was not served")
    )
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


def _route_label(path: str) -> str:
    # Bounded label set: model ids and record ids must not become metric labels.
    for prefix in (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/models",
        "/admin",
        "/audit",
    ):
        if path.startswith(prefix):
            return prefix
    return path if path in ("/healthz", "/readyz", "/metrics") else "other"
