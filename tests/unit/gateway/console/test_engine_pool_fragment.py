"""Issue 24: the engine pool on the administration page refreshes itself: the fragment carries its
own htmx poll (so each swap keeps polling), its refreshes are not audited (they hold no audit
data and come every 5 s), refusals are, and without a session htmx is sent to sign in."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient

from tests.unit.gateway.console.console_app import console_app, details, sign_in

POLL = 'hx-get="/console/admin/engines" hx-trigger="every 5s" hx-swap="outerHTML"'


def test_the_engine_pool_fragment_polls_itself_and_only_refusals_are_audited(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(console_app(tmp_path, state)) as client:
            anonymous = await client.get("/console/admin/engines", headers={"hx-request": "true"})
            assert anonymous.status_code == 401 and anonymous.headers["hx-redirect"] == "/console/sign-in"
            await sign_in(client, tmp_path, "root", "admin")
            assert POLL in (await client.get("/console/admin")).text
            before = await details(state["log"], "root")
            for _ in range(3):
                fragment = await client.get("/console/admin/engines", headers={"hx-request": "true"})
                assert fragment.status_code == 200 and fragment.text.startswith(f'<div id="engines" {POLL}>')
                assert "<html" not in fragment.text
            assert await details(state["log"], "root") == before

            client.cookies.clear()
            await sign_in(client, tmp_path, "wang", "compliance")
            refused = await client.get("/console/admin/engines", headers={"hx-request": "true"})
            assert refused.status_code == 403
            assert ("authorization_denial", "console engines", "missing admin:policy") in await details(
                state["log"], "wang"
            )

    asyncio.run(go())
