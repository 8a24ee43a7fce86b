"""The gateway's litestar application: routes, dependencies and the one error mapping."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.di import Provide
from litestar.exceptions import HTTPException

from gateway.auditor import Auditor, RequestSink
from gateway.console.console import Console
from gateway.console.router import console_template_config
from gateway.errors import (
    AuditUnavailable,
    GatewayError,
    PermissionDeniedError,
    http_error_of,
    recorded_reason,
    response_parts,
)
from gateway.gatekeeper import Gatekeeper, requires
from gateway.request_context import request_context
from gateway.request_middleware import RequestMiddleware
from gateway.routes.admin import ADMIN
from gateway.routes.openai import OPENAI_ROUTES, context_of
from gateway.services import Services
from gateway.telemetry import Telemetry
from policies.policy import ALL_DOMAINS

__all__ = ["build_app"]

_JSON = "application/json"


def _error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    if isinstance(exc, HTTPException) and not isinstance(exc, GatewayError):
        # Litestar's own refusals (unknown route, wrong method, body too large) in OpenAI's shape.
        # Litestar's headers stay: a 405 carries ``Allow`` (RFC 9110 requires it).
        err = GatewayError(str(exc.detail), headers=dict(exc.headers or {}))
        err.status_code = exc.status_code
        err.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        err.code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status_code, "invalid_request" if exc.status_code < 500 else "internal_error"
        )
        exc = err
    err = http_error_of(exc)
    ctx = request_context(request.scope)  # type: ignore[arg-type]
    ctx.error_reason = recorded_reason(err)
    ctx.is_audit_down = ctx.is_audit_down or err.code == AuditUnavailable.code
    status, body, headers = response_parts(err)
    if status == 429 and not getattr(exc, "retryable", True):
        # OpenAI SDKs retry 429s; a budget that retrying cannot fix says so.
        headers = {**headers, "x-should-retry": "false"}
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


async def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state.services
    return services


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=_JSON)


@get("/readyz")
async def readyz(services: Services) -> Response[bytes]:
    """503 unless the engine, the audit store and (when configured) Redis all work: a replica
    that would refuse every request (fail closed) must not receive traffic."""
    parts = await services.readiness()
    ready = all(ok is not False for ok in parts.values())
    # Unauthenticated: counts and booleans only, model names are for callers allowed to see them.
    body = {"ready": ready, "models": len(services.engines.models()), **parts}
    return Response(msgspec.json.encode(body), status_code=200 if ready else 503, media_type=_JSON)


@get("/metrics")
async def metrics_endpoint(request: Request[Any, Any, Any], services: Services) -> Response[bytes]:
    await services.authenticator.scraper(
        context_of(request, "/metrics"), request.headers.get("authorization")
    )
    text, content_type = services.telemetry.prometheus_text()
    # As a header, not a media type: litestar would append a second "; charset=utf-8".
    return Response(text, headers={"content-type": content_type})


_ENGINES = dataclasses.replace(
    ADMIN, domain=lambda _: ALL_DOMAINS, refusal=lambda: PermissionDeniedError("admin:policy is required")
)
"""Engines serve every tenant: only administrators of the whole domain ``*`` see them."""


@get("/admin/engines", guards=[requires(_ENGINES)])
async def admin_engines(services: Services) -> Response[bytes]:
    """The engine pool as the gateway sees it: health, models, load."""
    await services.engines.refresh()
    return Response(msgspec.json.encode({"engines": services.engines.describe()}), media_type=_JSON)


def _extra_routers() -> list[Any]:
    from gateway.console.router import build_console_router
    from gateway.routes.admin import build_admin_router
    from gateway.routes.audit import build_audit_router

    return [build_admin_router(), build_audit_router(), build_console_router()]


def _authorizer(services: Services) -> Any:
    return services.authorizer


def _audit_log(services: Services) -> Any:
    return services.audit_log


def _audit_sink(request: Request[Any, Any, Any], services: Services) -> Any:
    return RequestSink(services.audit_log, context_of(request, request.url.path))


def _redis(services: Services) -> Any:
    return services.redis


def _keep_collector_off_the_request_path() -> None:
    """Start-up objects are permanent; requests free almost everything by reference counting.

    Freezing what start-up built (modules, settings, policy tables, filter automata) keeps full
    collections from re-scanning it, which stalled every request in flight. With the default
    young-generation threshold (700) a collection ran every ten requests; requests leave few
    cycles behind, so a higher one costs little (figures in bench/BENCHMARKS.md).
    """
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, 20_000), middle, old)


def build_app(
    services_factory: Callable[[], Any],
    telemetry: Telemetry,
    *,
    max_body_bytes: int,
    grpc_shares_port: bool = False,
) -> Any:
    """The ASGI app. ``services_factory`` is awaited at start-up; its Services close at shutdown.
    With ``[grpc] enabled`` the gRPC API serves the same Services from start-up to shutdown
    (``grpc_shares_port``: several gateway workers bind its port, see ``GrpcServer``)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncGenerator[None, None]:
        services = app.state.services = await services_factory()
        Gatekeeper(services.authenticator, services.authorizer, services.inference.auditor).install(app.state)
        app.state.console = Console.create(app.state.services)
        grpc_server = None
        try:
            if services.settings.grpc.enabled:
                from gateway.grpc_api.server import GrpcServer  # grpc loads only where it serves

                grpc_server = await GrpcServer.start(services, shares_port=grpc_shares_port)
            _keep_collector_off_the_request_path()
            yield
        finally:
            if grpc_server is not None:
                await grpc_server.stop(services.settings.server.drain_s)
            if app.state.console is not None:
                await app.state.console.aclose()
            await app.state.services.aclose()

    app = Litestar(
        route_handlers=[*OPENAI_ROUTES, healthz, readyz, metrics_endpoint, admin_engines, *_extra_routers()],
        dependencies={
            "services": Provide(_services),
            "authorizer": Provide(_authorizer, sync_to_thread=False),
            "audit": Provide(_audit_sink, sync_to_thread=False),
            "audit_log": Provide(_audit_log, sync_to_thread=False),
            "redis": Provide(_redis, sync_to_thread=False),
        },
        exception_handlers={Exception: _error_response},
        lifespan=[lifespan],
        request_max_body_size=max_body_bytes,
        debug=False,
        logging_config=None,
        openapi_config=None,
        template_config=console_template_config(),
    )

    def auditor() -> Auditor | None:
        services = getattr(app.state, "services", None)
        return None if services is None else services.inference.auditor

    return RequestMiddleware(app, telemetry, auditor)
