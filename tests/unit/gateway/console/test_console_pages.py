"""Console pages in-process on real parts (``console_app``): sign-in, CSRF, RBAC, escaping, audit."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.query import AuditQuery
from common.audit_event import AuditEvent, Decision, EventType
from common.principal import Principal
from gateway.auth.dev_issuer import DevIssuer
from gateway.console.console import Console
from gateway.console.router import CSP
from policies.authorizer import Authorizer
from tests.unit.gateway.console.console_app import XSS
from tests.unit.gateway.console.console_app import console_app as _app
from tests.unit.gateway.console.console_app import details as _details
from tests.unit.gateway.console.console_app import rows as _rows
from tests.unit.gateway.console.console_app import sign_in as _sign_in


def test_content_needs_audit_content_and_every_view_is_recorded_first(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await _sign_in(client, tmp_path, "carol", "compliance")
            record = await client.get("/console/audit/records/2")
            assert record.status_code == 200 and 'data-testid="show-content"' in record.text
            content = await client.get("/console/audit/records/2/content", headers={"hx-request": "true"})
            assert content.status_code == 200 and "4111 1111 1111 1111" in content.text
            assert "<script>alert(1)</script>" not in content.text and "&lt;script&gt;" in content.text

        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await _sign_in(client, tmp_path, "dave", "auditor")
            record = await client.get("/console/audit/records/2")
            assert "show-content" not in record.text and "audit:content" in record.text
            refused = await client.get("/console/audit/records/2/content")
            assert refused.status_code == 403 and "4111" not in refused.text
            details = await _details(state["log"], "dave")
            assert ("authorization_denial", "console content view 2", "missing audit:content") in details

    asyncio.run(go())
    details = asyncio.run(_reopened_details(tmp_path, "carol"))
    assert ("audit_access", "console sign-in (dev issuer)", "") in details
    assert ("audit_access", "console content view 2", "") in details


async def _reopened_details(tmp_path: Path, subject: str) -> list[tuple[str, str, str]]:
    log = await AuditLog.open(AuditConfig(), tmp_path, heartbeat=False, record_lifecycle=False)
    try:
        return await _details(log, subject)
    finally:
        await log.close()


def test_planted_script_payloads_are_escaped_and_csp_forbids_inline(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await _sign_in(client, tmp_path, "carol", "compliance")
            charts = await client.get("/console/audit/charts", params={"since": "2000-01-01T00:00:00Z"})
            assert (
                charts.text.count('data-testid="chart"') == 4 and charts.text.count("<svg") == 3
            )  # no denials
            for url in (
                "/console/audit",
                "/console/audit/records/2",
                f"/console/audit?model={XSS}",
                "/console/audit/charts?since=2000-01-01T00:00:00Z",
            ):
                page = await client.get(url)
                assert page.status_code == 200
                assert "<script>alert" not in page.text and "<img src=x" not in page.text
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
                assert page.headers["content-security-policy"] == CSP
            assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP and "script-src 'self'" in CSP

    asyncio.run(go())


def test_forms_without_the_sessions_csrf_token_or_from_another_origin_are_refused(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            csrf = await _sign_in(client, tmp_path, "carol", "compliance")
            for kwargs in (
                {"data": {}},
                {"data": {"_csrf": csrf + "x"}},
                {"data": {"_csrf": csrf}, "headers": {"origin": "https://evil.example"}},
                {"data": {"_csrf": csrf}, "headers": {"origin": "null"}},
            ):
                refused = await client.post("/console/sign-out", follow_redirects=False, **kwargs)  # type: ignore[arg-type]
                assert refused.status_code == 403, kwargs
                verify = await client.post("/console/audit/verify", **kwargs)  # type: ignore[arg-type]
                assert verify.status_code == 403
            assert (await client.get("/console/audit")).status_code == 200  # still signed in
            verified = await client.post("/console/audit/verify", headers={"x-csrf-token": csrf})
            assert verified.status_code == 200 and "Intact" in verified.text
            out = await client.post("/console/sign-out", data={"_csrf": csrf}, follow_redirects=False)
            assert out.status_code == 303 and out.headers["location"] == "/console/sign-in"
            gone = await client.get("/console/audit", follow_redirects=False)
            assert gone.status_code == 303 and gone.headers["location"] == "/console/sign-in"

            # Login CSRF: the dev form needs the value of this browser's sign-in cookie.
            token = DevIssuer.load_or_create(tmp_path).mint("carol", ["compliance"])
            forged = await client.post("/console/sign-in/dev", data={"_csrf": "guess", "token": token})
            assert forged.status_code == 403

    asyncio.run(go())


def test_roles_without_audit_read_and_bad_tokens_get_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await _sign_in(client, tmp_path, "bob", "analyst")
            for url in ("/console/audit", "/console/audit/records/2", "/console/audit/export/download"):
                page = await client.get(url)
                assert page.status_code == 403 and "4111" not in page.text and "pii.card" not in page.text
            assert ("authorization_denial", "console record 2", "missing audit:read") in await _details(
                state["log"], "bob"
            )
            page = await client.get("/console/sign-in")
            login = re.search(r'name="_csrf" value="([^"]+)"', page.text)
            assert login is not None
            bad = await client.post(
                "/console/sign-in/dev", data={"_csrf": login.group(1), "token": "e30.e30.e30"}
            )
            assert bad.status_code == 401 and "Sign-in failed" in bad.text

    asyncio.run(go())


def test_an_idp_callback_with_a_foreign_or_replayed_state_signs_nobody_in(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            console: Console = client.app.state.console  # type: ignore[attr-defined]
            pending = console.pending.start()
            # The state is real but this browser never started it (no state cookie): login CSRF.
            forged = await client.get("/console/callback", params={"code": "c", "state": pending.state})
            assert forged.status_code == 401 and "strongroom_console=" not in forged.headers.get(
                "set-cookie", ""
            )
            page = await state["log"].search(AuditQuery(event_type="authentication_failure"))
            assert any("foreign sign-in state" in r.event.reason for r in page.records)

    asyncio.run(go())


def test_only_admin_policy_edits_grants_and_a_refused_edit_changes_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            csrf = await _sign_in(client, tmp_path, "carol", "compliance")
            authorizer = client.app.state.services.authorizer  # type: ignore[attr-defined]
            version = authorizer.version
            assert "Administration" not in (await client.get("/console/audit")).text
            assert (await client.get("/console/admin")).status_code == 403
            form = {
                "_csrf": csrf,
                "op": "grant",
                "role": "carol-role",
                "model": "demo-chat",
                "action": "chat",
            }
            refused = await client.post("/console/admin/grants", data=form, headers={"hx-request": "true"})
            assert refused.status_code == 403 and authorizer.version == version
            assert (
                "authorization_denial",
                "console grant 'carol-role' chat 'demo-chat'",
                "missing admin:policy",
            ) in (await _details(state["log"], "carol"))

    asyncio.run(go())


def test_language_follows_the_browser_until_the_officer_switches(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            zh = await client.get("/console/sign-in", headers={"accept-language": "zh-CN,zh;q=0.9,en;q=0.8"})
            assert '<html lang="zh">' in zh.text and "使用开发令牌登录" in zh.text
            en = await client.get("/console/sign-in", headers={"accept-language": "en-GB,zh;q=0.5"})
            assert '<html lang="en">' in en.text and "Sign in with dev token" in en.text
            switched = await client.get(
                "/console/language",
                params={"to": "zh"},
                headers={"referer": "http://testserver.local/console/sign-in"},
                follow_redirects=False,
            )
            assert switched.status_code == 303 and switched.headers["location"] == "/console/sign-in"
            assert (
                "使用开发令牌登录"
                in (await client.get("/console/sign-in", headers={"accept-language": "en"})).text
            )
            foreign = await client.get(
                "/console/language", params={"to": "en"}, headers={"referer": "https://evil.example/x"}
            )
            assert foreign.url.path == "/console/sign-in"  # /console/ -> sign-in; never off-site

    asyncio.run(go())


def test_cookies_are_httponly_samesite_and_secure_under_tls(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(
            _app(tmp_path, state, secure_cookies=True), base_url="https://testserver.local"
        ) as client:
            page = await client.get("/console/sign-in")
            login = re.search(r'name="_csrf" value="([^"]+)"', page.text)
            assert login is not None
            token = DevIssuer.load_or_create(tmp_path).mint("carol", ["compliance"])
            signed_in = await client.post(
                "/console/sign-in/dev", data={"_csrf": login.group(1), "token": token}, follow_redirects=False
            )
            session_cookie = next(
                v for v in signed_in.headers.get_list("set-cookie") if v.startswith("strongroom_console=")
            )
            flags = {part.strip().lower() for part in session_cookie.split(";")[1:]}
            assert {"httponly", "secure", "samesite=lax", "path=/console", "max-age=28800"} <= flags
            assert (
                signed_in.headers["location"] == "/console/audit"
                and "token" not in signed_in.headers["location"]
            )

    asyncio.run(go())


def test_an_admin_assigns_a_user_a_role_and_takes_it_back(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            csrf = await _sign_in(client, tmp_path, "root", "admin")
            authorizer = client.app.state.services.authorizer  # type: ignore[attr-defined]
            erin = Principal(subject="erin", roles=(), issuer="test")
            assert not authorizer.allowed(erin, "chat", "demo-chat")
            form = {"_csrf": csrf, "op": "assign", "user": "erin", "role": "analyst"}
            assigned = await client.post(
                "/console/admin/assignments", data=form, headers={"hx-request": "true"}
            )
            assert assigned.status_code == 200 and "root assigned analyst to erin" in assigned.text
            assert authorizer.allowed(erin, "chat", "demo-chat")
            bad = {**form, "user": "has space"}
            refused = await client.post(
                "/console/admin/assignments", data=bad, headers={"hx-request": "true"}
            )
            assert refused.status_code == 400 and "invalid" in refused.text
            form["op"] = "unassign"
            removed = await client.post(
                "/console/admin/assignments", data=form, headers={"hx-request": "true"}
            )
            assert removed.status_code == 200 and not authorizer.allowed(erin, "chat", "demo-chat")
        changes = (await _reopened_changes(tmp_path))[-2:]
        assert [(c.subject, c.detail.split()[0]) for c in changes] == [
            ("root", "assign"),
            ("root", "unassign"),
        ]

    asyncio.run(go())


async def _reopened_changes(tmp_path: Path) -> list[AuditEvent]:
    log = await AuditLog.open(AuditConfig(), tmp_path, heartbeat=False, record_lifecycle=False)
    try:
        page = await log.search(AuditQuery(event_type="admin_change", limit=1000))
        return [r.event for r in page.records]
    finally:
        await log.close()


def test_revoking_the_officers_subject_ends_the_console_session(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await _sign_in(client, tmp_path, "carol", "compliance")
            assert (await client.get("/console/audit")).status_code == 200
            await state["verifier"]._revocations.revoke_subject("carol", before=time.time() + 1)
            ended = await client.get("/console/audit", follow_redirects=False)
            assert ended.status_code == 303 and ended.headers["location"] == "/console/sign-in"
            page = await state["log"].search(AuditQuery(subject="carol", event_type="authentication_failure"))
            assert [r.event.reason for r in page.records] == ["console session ended: token revoked"]

    asyncio.run(go())


def test_a_tenant_scoped_officer_sees_and_changes_only_its_tenant(tmp_path: Path) -> None:
    """The console applies the API's domain scope (issue 18, finding 2): a retail auditor's search
    is pinned to retail, another tenant's filter or record is refused, verify and export (every
    tenant's chain) need the right in every tenant, and a tenant administrator writes only in its
    tenant and hands out no right it lacks."""
    from policies.policy import Grant
    from policies.policy_change import PolicyChange

    async def seed(log: AuditLog, authorizer: Authorizer) -> None:
        for tenant in ("retail", "wholesale"):
            await log.append(
                AuditEvent(
                    event_type=EventType.INFERENCE, decision=Decision.ALLOW, subject=f"shopper-{tenant}",
                    tenant=tenant, model="demo-chat",
                )
            )  # fmt: skip
        grants = [
            Grant(role="retail-reader", pattern="*", action="audit:read", domain="retail"),
            Grant(role="retail-admin", pattern="*", action="admin:policy", domain="retail"),
        ]
        await authorizer.change([PolicyChange(op="grant", rule=g) for g in grants], "root", log)

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state, seed=seed)) as client:
            log: AuditLog = state["log"]
            await _sign_in(client, tmp_path, "rita", "retail-reader", tenant="retail")
            mine = await client.get("/console/audit")
            assert mine.status_code == 200 and "shopper-retail" in mine.text
            assert "shopper-wholesale" not in mine.text and "pii.card" not in mine.text
            other = await client.get("/console/audit", params={"tenant": "wholesale"})
            assert other.status_code == 403 and "shopper-wholesale" not in other.text
            page = await log.search(AuditQuery(subject="shopper-wholesale", limit=5))
            seq = page.records[0].seq
            assert (await client.get(f"/console/audit/records/{seq}")).status_code == 404
            for url in ("/console/audit/verify", "/console/audit/export"):
                assert (await client.get(url)).status_code == 403, url
            charts = await client.get("/console/audit/charts", params={"tenant": "wholesale"})
            assert charts.status_code == 403
            reasons = [r for _, _, r in await _details(log, "rita")]
            assert "audit:read not held in tenant 'wholesale'" in reasons
            assert f"record {seq} is outside the officer's tenant" in reasons

            client.cookies.clear()
            await _sign_in(client, tmp_path, "ada", "retail-admin", tenant="retail")
            admin_page = await client.get("/console/admin")
            page_html = admin_page.text
            assert admin_page.status_code == 200, page_html[:2000]
            found = re.search(r'name="_csrf" value="([^"]+)"', page_html)
            assert found is not None
            csrf = found.group(1)
            granted = await client.post(
                "/console/admin/grants",
                data={
                    "_csrf": csrf,
                    "op": "grant",
                    "role": "shopper",
                    "model": "demo-chat",
                    "action": "chat",
                },
                headers={"hx-request": "true"},
            )
            assert granted.status_code == 200, granted.text
            policy = state["authorizer"].policy
            assert Grant(role="shopper", pattern="demo-chat", action="chat", domain="retail") in policy.grants
            assert not any(g.role == "shopper" and g.domain == "*" for g in policy.grants)
            escalated = await client.post(
                "/console/admin/assignments",
                data={"_csrf": csrf, "op": "assign", "user": "ada", "role": "admin"},
                headers={"hx-request": "true"},
            )
            assert escalated.status_code == 400 and "would hand out permissions not held" in escalated.text
            assignments = state["authorizer"].policy.assignments
            assert not any(a.role == "admin" and a.member == "user:ada" for a in assignments)

    asyncio.run(go())


def test_the_admin_page_shows_policy_changes_within_the_officers_tenant_escaped(tmp_path: Path) -> None:
    """Issue 24: the recent admin_change records with version, edit, actor and time, newest first;
    a tenant administrator sees its own tenant's changes only (not another tenant's, not a
    record it cannot place such as a tamper refusal); planted payloads are escaped."""
    from policies.errors import PolicyTamperedError
    from policies.policy import Assignment, Grant
    from policies.policy_change import PolicyChange
    from policies.policy_seal import tamper_event

    async def seed(log: AuditLog, authorizer: Authorizer) -> None:
        retail_admin = Grant(role="retail-admin", pattern="*", action="admin:policy", domain="retail")
        await authorizer.change([PolicyChange(op="grant", rule=retail_admin)], "root", log)
        wholesale = Grant(role="buyer", pattern="demo-chat", action="chat", domain="wholesale")
        await authorizer.change([PolicyChange(op="grant", rule=wholesale)], XSS, log)
        retail = Assignment(member="user:erin", role="analyst", domain="retail")
        await authorizer.change([PolicyChange(op="assign", rule=retail)], "ada", log)
        await authorizer.change([PolicyChange(op="unassign", rule=retail)], "ada", log)
        await log.append(tamper_event(PolicyTamperedError(f"seal mismatch {XSS}"), action="kept"))

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state, seed=seed)) as client:
            await _sign_in(client, tmp_path, "root", "admin")
            page = await client.get("/console/admin")
            assert page.status_code == 200
            assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text
            everything = _rows(page.text, "policy-history")
            assert len(everything) == 5, everything
            assert "seal mismatch" in everything[0] and "kept" in everything[0]
            assert everything[1].startswith("5 unassign g, user:erin, analyst, retail ada")
            assert everything[2].startswith("4 assign g, user:erin, analyst, retail ada")
            assert everything[3].startswith("3 grant p, buyer, wholesale, demo-chat, chat")
            assert everything[4].startswith("2 grant p, retail-admin, retail, *, admin:policy root")

            client.cookies.clear()
            await _sign_in(client, tmp_path, "ada", "retail-admin", tenant="retail")
            mine = _rows((await client.get("/console/admin")).text, "policy-history")
            assert len(mine) == 3, mine
            assert mine[0].startswith("5 unassign g, user:erin, analyst, retail ada")
            assert mine[1].startswith("4 assign g, user:erin, analyst, retail ada")
            assert mine[2].startswith("2 grant p, retail-admin, retail, *, admin:policy root")
            assert "wholesale" not in " ".join(mine) and "&lt;script&gt;" not in " ".join(mine)
            assert "console admin chat" in [d for _, d, _ in await _details(state["log"], "ada")]

    asyncio.run(go())


def test_the_keys_page_lists_sealings_and_key_versions_for_every_tenant_key_officers(tmp_path: Path) -> None:
    """Issue 24: admin:keys in every tenant reads the seal registry (model, version, seal id,
    manifest digest, path, pinned) and the key versions; a provider that cannot be opened or a
    registry that does not verify is said plainly; nobody else gets the page; payloads escaped."""
    from keys.key_file_provider import KeyFileProvider
    from keys.seal_registry import SealRegistry
    from policies.policy import Grant
    from policies.policy_change import PolicyChange

    async def seed(log: AuditLog, authorizer: Authorizer) -> None:
        keeper = Grant(role="retail-keeper", pattern="*", action="admin:keys", domain="retail")
        await authorizer.change([PolicyChange(op="grant", rule=keeper)], "root", log)

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state, seed=seed)) as client:
            await _sign_in(client, tmp_path, "root", "admin")
            assert 'data-testid="keys-link"' in (await client.get("/console/admin")).text
            closed = await client.get("/console/admin/keys")
            assert closed.status_code == 200 and "The key provider cannot be opened" in closed.text
            assert _rows(closed.text, "sealings") == ["No sealed model is registered."]

            provider = KeyFileProvider.create(tmp_path / "keys" / "master.key")
            registry = SealRegistry(tmp_path / "keys" / "sealings.json", provider)
            registry.register("demo-chat", "seal-one", "a" * 64, tmp_path / "v1", by=XSS)
            registry.register("demo-chat", "seal-two", "b" * 64, tmp_path / "v2", by="root")
            registry.pin("demo-chat", "seal-one")
            page = await client.get("/console/admin/keys")
            assert page.status_code == 200 and 'data-testid="keys-problem"' not in page.text
            assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text
            one, two = _rows(page.text, "sealings")
            assert one.startswith(f"demo-chat 1 seal-one {'a' * 64} {tmp_path / 'v1'} pinned")
            assert two.startswith(f"demo-chat 2 seal-two {'b' * 64} {tmp_path / 'v2'} 20")
            (version,) = provider.versions()
            assert _rows(page.text, "key-versions") == [
                f"{version.ref.key_id} 1 current {version.signing_public_key}"
            ]

            signed = (tmp_path / "keys" / "sealings.json").read_text()
            (tmp_path / "keys" / "sealings.json").write_text(signed.replace("seal-two", "seal-evil"))
            tampered = await client.get("/console/admin/keys")
            assert "does not verify" in tampered.text and "seal-evil" not in tampered.text
            assert len(_rows(tampered.text, "key-versions")) == 1

            for sub, role, tenant in (("dave", "auditor", None), ("kim", "retail-keeper", "retail")):
                client.cookies.clear()
                await _sign_in(client, tmp_path, sub, role, tenant=tenant)
                refused = await client.get("/console/admin/keys")
                assert refused.status_code == 403 and "seal-one" not in refused.text, sub
            assert "console keys" in [d for _, d, _ in await _details(state["log"], "root")]

    asyncio.run(go())
