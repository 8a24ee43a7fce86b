"""Outermost ASGI layer: request id, trace span and duration for every HTTP request.

It stamps ``x-request-id`` on every response, errors included, with the same id the audit
record carries, and ends the span only when the last body byte (of a stream too) is sent.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from gateway.request_context import new_request_id
from gateway.telemetry import Telemetry

__all__ = ["RequestMiddleware"]

ASGIApp = Any


class RequestMiddleware:
    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

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
        scope["state"]["trace_id"] = format(span.get_span_context().trace_id, "032x")
        scope["state"]["otel_context"] = ctx

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
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


def _route_label(path: str) -> str:
    # Bounded label set: model ids and record ids must not become metric labels.
    for prefix in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/admin", "/audit"):
        if path.startswith(prefix):
            return prefix
    return path if path in ("/healthz", "/readyz", "/metrics") else "other"
