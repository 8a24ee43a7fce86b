from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.testing import AsyncTestClient

from audit.errors import AuditUnavailableError
from common.audit_event import AuditEvent, EventType
from gateway.errors import response_parts
from gateway.routes.admin import build_admin_router
from policies import AccessConfig, Authorizer
from tests.unit.gateway.routes.callers import bearer, gatekeeper


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []
        self.failing = False

    async def append(self, event: AuditEvent) -> int:
        if self.failing:
            raise AuditUnavailableError("down")
        self.events.append(event)
        return len(self.events)


def make_app(authorizer: Authorizer, sink: ListSink) -> Litestar:
    async def provide_authorizer() -> Authorizer:
        return authorizer

    async def provide_audit() -> ListSink:
        return sink

    def on_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        status, body, headers = response_parts(exc)
        return Response(content=body, status_code=status, headers=headers, media_type="application/json")

    app = Litestar(
        route_handlers=[build_admin_router()],
        dependencies={
            "authorizer": Provide(provide_authorizer),
            "audit": Provide(provide_audit),
        },
        exception_handlers={Exception: on_error},
    )
    gatekeeper(authorizer, sink).install(app.state)
    return app


ADMIN = bearer("root", "admin")
ANALYST = bearer("ann", "analyst")


def run(tmp_path: Path, body: Any) -> None:
    authorizer, sink = Authorizer.open(AccessConfig(), tmp_path), ListSink()

    async def go() -> None:
        async with AsyncTestClient(app=make_app(authorizer, sink)) as client:
            await body(client, authorizer, sink)

    asyncio.run(go())


def test_guarded_by_admin_policy(tmp_path: Path) -> None:
    async def body(client: AsyncTestClient[Litestar], authorizer: Authorizer, sink: ListSink) -> None:
        for method, path in [("GET", "/admin/policy"), ("POST", "/admin/grants"), ("POST", "/admin/check")]:
            r = await client.request(
                method, path, headers=ANALYST, json={"role": "a", "pattern": "x", "action": "chat"}
            )
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"]["code"] == "permission_denied"
        assert authorizer.version == 1
        assert [e.event_type for e in sink.events] == [EventType.AUTHORIZATION_DENIAL] * 3
        assert sink.events[1].subject == "ann" and sink.events[1].endpoint == "/admin/grants"
        sink.failing = True  # a denial that cannot be recorded is not answered 403 but 503
        r = await client.get("/admin/policy", headers=ANALYST)
        assert r.status_code == 503

    run(tmp_path, body)


def test_grant_check_revoke_round_trip(tmp_path: Path) -> None:
    async def body(client: AsyncTestClient[Litestar], authorizer: Authorizer, sink: ListSink) -> None:
        check = {"user": "ann", "roles": ["analyst"], "action": "chat", "model": "org/base-7b"}
        assert (await client.post("/admin/check", headers=ADMIN, json=check)).json()["allowed"] is False
        grant = {"role": "analyst", "pattern": "org/*", "action": "chat"}
        r = await client.post("/admin/grants", headers=ADMIN, json=grant)
        assert r.status_code == 201 and r.json()["version"] == 2
        assert (await client.post("/admin/check", headers=ADMIN, json=check)).json()["allowed"] is True
        assert (await client.post("/admin/grants", headers=ADMIN, json=grant)).status_code == 409
        policy = (await client.get("/admin/policy", headers=ADMIN)).json()
        assert (
            policy["version"] == 2
            and {"role": "analyst", "pattern": "org/*", "action": "chat", "domain": "*"} in policy["grants"]
        )
        r = await client.post("/admin/grants/remove", headers=ADMIN, json=grant)
        assert r.status_code == 200 and r.json()["version"] == 3
        assert (await client.post("/admin/grants/remove", headers=ADMIN, json=grant)).status_code == 404
        assert [e.event_type for e in sink.events] == [EventType.ADMIN_CHANGE] * 2
        assert sink.events[0].subject == "root" and json.loads(sink.events[0].after)["version"] == 2

    run(tmp_path, body)


def test_assign_and_effective_permissions(tmp_path: Path) -> None:
    async def body(client: AsyncTestClient[Litestar], authorizer: Authorizer, sink: ListSink) -> None:
        r = await client.post("/admin/assignments", headers=ADMIN, json={"user": "bob", "role": "admin"})
        assert r.status_code == 201
        perms = (await client.get("/admin/permissions", headers=ADMIN, params={"user": "bob"})).json()
        assert perms["roles"] == ["admin", "analyst"]
        assert {"role": "admin", "pattern": "*", "action": "admin:policy", "domain": "*"} in perms["grants"]
        # bob now administers although his token carries no role
        assert (await client.get("/admin/policy", headers=bearer("bob"))).status_code == 200
        role = (await client.get("/admin/permissions", headers=ADMIN, params={"role": "analyst"})).json()
        assert {g["pattern"] for g in role["grants"]} == {"demo-chat", "demo-embed"}
        r = await client.post(
            "/admin/assignments/remove", headers=ADMIN, json={"user": "bob", "role": "admin"}
        )
        assert r.status_code == 200
        assert (await client.get("/admin/policy", headers=bearer("bob"))).status_code == 403

    run(tmp_path, body)


def test_invalid_input_is_400_saying_what(tmp_path: Path) -> None:
    async def body(client: AsyncTestClient[Litestar], authorizer: Authorizer, sink: ListSink) -> None:
        cases = [
            (
                "/admin/grants",
                {"role": "analyst", "pattern": "qwen-7b", "action": "fly"},
                "action 'fly' is unknown",
            ),
            (
                "/admin/grants",
                {"role": "bad role", "pattern": "m", "action": "chat"},
                "role 'bad role' is invalid",
            ),
            ("/admin/grants", {"role": "a", "pattern": "m", "action": "audit:read"}, "pattern must be '*'"),
            ("/admin/assignments", {"role": "admin"}, "exactly one of 'user' or 'member_role'"),
            ("/admin/check", {"action": "chat"}, "give 'user', 'roles'"),
        ]
        for path, payload, words in cases:
            r = await client.post(path, headers=ADMIN, json=payload)
            assert r.status_code == 400, (path, r.text)
            assert words in r.json()["error"]["message"]
        r = await client.post("/admin/grants", headers=ADMIN, json={"role": "a"})
        assert r.status_code == 400
        r = await client.get("/admin/permissions", headers=ADMIN)
        assert r.status_code == 400
        assert authorizer.version == 1 and not sink.events

    run(tmp_path, body)


def test_audit_down_means_change_refused(tmp_path: Path) -> None:
    async def body(client: AsyncTestClient[Litestar], authorizer: Authorizer, sink: ListSink) -> None:
        sink.failing = True
        r = await client.post(
            "/admin/grants", headers=ADMIN, json={"role": "analyst", "pattern": "x", "action": "chat"}
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "audit_unavailable"
        assert authorizer.version == 1 and authorizer.store.version() == 1

    run(tmp_path, body)
