"""Issue 24: quotas per role or user in the console. An administrator of every tenant sets
overrides anywhere, a tenant's administrator only in its tenant and not above the every-tenant
limits (refusals recorded); each change is an admin_change record with the administrator's
identity before it takes effect; the gateway's Quotas resolve the new limits at once; overrides
live in Redis; payloads stay text."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import redis
from litestar.testing import AsyncTestClient

from audit.log import AuditLog
from audit.query import AuditQuery
from common.principal import Principal
from policies.authorizer import Authorizer
from policies.policy import Grant
from policies.policy_change import PolicyChange
from tests.unit.gateway.console.console_app import XSS, console_app, rows, sign_in

ANALYST = Principal(subject="alice", roles=("analyst",), issuer="idp", tenant="retail")


async def _seed(log: AuditLog, authorizer: Authorizer) -> None:
    retail_admin = Grant(role="retail-admin", pattern="*", action="admin:policy", domain="retail")
    await authorizer.change([PolicyChange(op="grant", rule=retail_admin)], "root", log)


def test_administrators_set_and_remove_quota_overrides_within_their_reach(tmp_path: Path) -> None:
    prefix = f"test:console:{uuid.uuid4().hex}"

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(console_app(tmp_path, state, seed=_seed, redis_prefix=prefix)) as client:
            quotas = state["services"].quotas
            csrf = await sign_in(client, tmp_path, "root", "admin")
            assert 'href="/console/admin/quotas"' in (await client.get("/console/admin")).text
            page = await client.get("/console/admin/quotas")
            assert page.status_code == 200 and rows(page.text, "quota-overrides") == ["No override is set."]
            assert rows(page.text, "quota-config")[0] == "default – 600 1000000 32 32768"

            async def post(**fields: str) -> Any:
                return await client.post("/console/admin/quotas", data={"_csrf": csrf, **fields})

            assert (
                await client.post("/console/admin/quotas", data={"kind": "role", "name": "x"})
            ).status_code == 403
            bad = await post(kind="role", name="analyst", domain="*", requests_per_minute="0")
            assert bad.status_code == 400 and "Not changed" in bad.text
            bad = await post(kind="role", name="analyst", domain="*", requests_per_minute="lots")
            assert bad.status_code == 400 and "whole number" in bad.text
            assert quotas.overrides.all() == []

            done = await post(
                kind="role", name="analyst", domain="*", requests_per_minute="5", tokens_per_minute=""
            )
            assert done.status_code == 200, done.text
            assert "root set quota: role analyst in *: requests_per_minute=5." in done.text
            assert quotas.limits_for(ANALYST).requests_per_minute == 5
            escaped = await post(kind="user", name=XSS, domain="retail", concurrent_requests="1")
            assert escaped.status_code == 200 and "<script>alert(1)</script>" not in escaped.text
            assert "&lt;script&gt;" in escaped.text
            with redis.Redis(host="127.0.0.1", port=6379) as direct:  # the app's client is on its own loop
                stored = sorted(direct.scan_iter(f"{prefix}:quota:overrides*"))
                assert len(stored) == 2 and direct.hlen(stored[0]) == 2  # the hash and its version

            # A tenant's administrator: its own tenant only; the * override is out of its sight.
            client.cookies.clear()
            await sign_in(client, tmp_path, "lin", "retail-admin", tenant="retail")
            own = await client.get("/console/admin/quotas")
            csrf = re.findall(r'name="_csrf" value="([^"]+)"', own.text)[0]
            shown = rows(own.text, "quota-overrides")
            assert len(shown) == 1 and "retail" in shown[0] and "analyst" not in shown[0]
            assert 'name="domain" value="retail"' in own.text
            refused = await post(kind="role", name="analyst", domain="*", requests_per_minute="500")
            assert refused.status_code == 403 and "Refused" in refused.text
            assert quotas.limits_for(ANALYST).requests_per_minute == 5
            above = await post(kind="role", name="analyst", domain="retail", requests_per_minute="8")
            assert above.status_code == 403 and "requests_per_minute 8 &gt; 5" in above.text
            mine = await post(kind="role", name="analyst", domain="retail", requests_per_minute="3")
            assert mine.status_code == 200 and quotas.limits_for(ANALYST).requests_per_minute == 3
            removed = await post(kind="role", name="analyst", domain="retail")
            assert "lin removed the quota override of role analyst in retail." in removed.text
            assert quotas.limits_for(ANALYST).requests_per_minute == 5

            client.cookies.clear()
            await sign_in(client, tmp_path, "wang", "compliance")
            assert (await client.get("/console/admin/quotas")).status_code == 403

            changes = await state["log"].search(AuditQuery(event_type="admin_change", limit=100))
            quota_changes = [
                (r.event.subject, r.event.detail)
                for r in changes.records
                if r.event.detail.startswith("quota ")
            ]
            assert quota_changes == [
                ("root", "quota role analyst in *: requests_per_minute=5"),
                ("root", f"quota user {XSS} in retail: concurrent_requests=1"),
                ("lin", "quota role analyst in retail: requests_per_minute=3"),
                ("lin", "quota role analyst in retail: (no limit set)"),
            ]
            denials = await state["log"].search(
                AuditQuery(subject="lin", event_type="authorization_denial", limit=10)
            )
            assert [
                (r.event.reason, r.event.detail)
                for r in denials.records
                if r.event.detail.startswith("quota")
            ] == [
                ("admin:policy not held in domain '*'", "quota role analyst in *: requests_per_minute=500"),
                (
                    "above the every-tenant limits: requests_per_minute 8 > 5",
                    "quota role analyst in retail: requests_per_minute=8",
                ),
            ]
            # Quota changes are not policy edits: the policy history leaves them out.
            client.cookies.clear()
            await sign_in(client, tmp_path, "root", "admin")
            history = rows((await client.get("/console/admin")).text, "policy-history")
            assert not any(re.search(r"quota", line) for line in history)

    asyncio.run(go())
