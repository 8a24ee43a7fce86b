"""Route guards: a denial is a 403 and an audit record, written before the answer; every
/admin and /audit route declares its permission."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Response, get
from litestar.di import NamedDependency
from litestar.testing import AsyncTestClient

from common.audit_event import AuditEvent, Decision, EventType
from gateway.errors import PermissionDeniedError, response_parts
from gateway.gatekeeper import Gatekeeper, requires
from gateway.permission import Permission
from gateway.routes.admin import build_admin_router
from gateway.routes.audit import build_audit_router
from policies import AccessConfig, Authorizer
from policies.control_scope import ControlScope
from tests.unit.gateway.routes.callers import bearer, gatekeeper

WHOLE_LOG = Permission(
    actions=("audit:read",),
    refusal=lambda: PermissionDeniedError("no"),
    domain=lambda _: "*",
    detail=lambda c: f"probe {c.query_params.get('q')}",
)


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent) -> int:
        self.events.append(event)
        return len(self.events)


@get("/probe", guards=[requires(WHOLE_LOG)], dependencies=Gatekeeper.dependencies())
async def probe(control_scope: NamedDependency[ControlScope]) -> dict[str, str | None]:
    return {"domain": control_scope.domain}


def test_a_denial_is_a_403_and_an_audit_record(tmp_path: Path) -> None:
    sink = ListSink()

    def on_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        status, body, headers = response_parts(exc)
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    app = Litestar(route_handlers=[probe], exception_handlers={Exception: on_error})
    gatekeeper(Authorizer.open(AccessConfig(), tmp_path), sink).install(app.state)

    async def go() -> None:
        async with AsyncTestClient(app) as client:
            outsider = await client.get("/probe", params={"q": "x"}, headers=bearer("ann", "analyst"))
            tenant = await client.get("/probe", headers=bearer("tom", "auditor", tenant="retail"))
            nobody = await client.get("/probe")
            reader = await client.get("/probe", headers=bearer("alice", "auditor"))
        assert [r.status_code for r in (outsider, tenant, nobody)] == [403, 403, 401]
        assert outsider.json()["error"]["message"] == "no"
        assert reader.status_code == 200 and reader.json() == {"domain": "*"}

    asyncio.run(go())
    assert [(e.event_type, e.decision, e.subject, e.status, e.reason, e.detail) for e in sink.events] == [
        (EventType.AUTHORIZATION_DENIAL, Decision.DENY, "ann", 403, "missing audit:read", "probe x"),
        (
            EventType.AUTHORIZATION_DENIAL,
            Decision.DENY,
            "tom",
            403,
            "audit:read not held in domain '*'",
            "probe None",
        ),
        (EventType.AUTHENTICATION_FAILURE, Decision.DENY, "", 401, "missing Authorization header", ""),
    ]
    assert sink.events[0].endpoint == "/probe" and sink.events[1].tenant == "retail"


def test_every_control_plane_route_declares_a_permission() -> None:
    for router in (build_admin_router(), build_audit_router()):
        for route in router.routes:
            for handler in route.route_handlers:  # type: ignore[union-attr]
                if handler.http_methods != {"OPTIONS"}:  # litestar's own CORS preflight answer
                    assert handler.guards, f"{route.path} has no guard"


def test_a_guard_without_a_gatekeeper_refuses(tmp_path: Path) -> None:
    app = Litestar(route_handlers=[probe])  # no Gatekeeper installed: nothing is served

    async def go() -> int:
        async with AsyncTestClient(app) as client:
            return (await client.get("/probe", headers=bearer("alice", "auditor"))).status_code

    assert asyncio.run(go()) == 500
