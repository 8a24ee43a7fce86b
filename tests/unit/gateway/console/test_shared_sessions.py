"""Two gateway processes' consoles sharing their state (one Redis, or without Redis the policy's
PostgreSQL): each accepts the other's session cookie and CSRF token, and signing out on one ends
the session on the other."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from tests.unit.gateway.console.console_app import POSTGRES_DSN, console_app, sign_in


@pytest.mark.parametrize("shared", ["redis", "postgres"])
def test_replicas_share_sessions_and_sign_out(tmp_path: Path, shared: str) -> None:
    name = uuid.uuid4().hex[:12]
    where: dict[str, Any] = (
        {"redis_prefix": f"test:console:{name}"}
        if shared == "redis"
        else {"postgres_schema": f"test_console_{name}"}
    )
    one_dir, two_dir = tmp_path / "one", tmp_path / "two"
    one_dir.mkdir()
    two_dir.mkdir()

    async def go() -> None:
        one_state: dict[str, Any] = {}
        two_state: dict[str, Any] = {}
        one_app = console_app(one_dir, one_state, **where)
        two_app = console_app(two_dir, two_state, **where)
        async with AsyncTestClient(one_app) as one, AsyncTestClient(two_app) as two:
            # Each replica has its own audit log and revocation list; only Redis is shared.
            csrf = await sign_in(one, one_dir, "officer.wang", "compliance")
            cookie = one.cookies["strongroom_console"]
            two.cookies.set("strongroom_console", cookie, domain="testserver.local", path="/console")
            on_two = await two.get("/console/audit", follow_redirects=False)
            assert on_two.status_code == 200 and ">officer.wang<" in on_two.text
            # A form built on replica one is accepted by replica two: the CSRF token is the session's.
            verify = await two.post("/console/audit/verify", data={"_csrf": csrf}, follow_redirects=False)
            assert verify.status_code == 200, verify.text

            signed_out = await two.post("/console/sign-out", data={"_csrf": csrf}, follow_redirects=False)
            assert signed_out.status_code == 303
            after = await one.get("/console/audit", follow_redirects=False)
            assert after.status_code == 303 and after.headers["location"] == "/console/sign-in"

    try:
        asyncio.run(go())
    finally:
        if shared == "postgres":
            with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {where['postgres_schema']} CASCADE")
