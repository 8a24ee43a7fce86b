"""/audit routes on a real AuditLog (temp SQLite) and a real Authorizer over the default policy."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.testing import AsyncTestClient

from audit.bundle import verify_bundle
from audit.config import AuditConfig
from audit.errors import AuditError
from audit.log import AuditLog
from audit.record import AuditContent
from audit.signer import CheckpointVerifier
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding
from gateway.routes.audit import build_audit_router
from policies.authorizer import Authorizer
from policies.config import AccessConfig
from tests.unit.gateway.routes.callers import bearer, gatekeeper


def _error(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, AuditError)
    return Response({"error": {"message": str(exc), "code": exc.code}}, status_code=exc.status_code)


def _app(tmp_path: Path, state: dict[str, Any]) -> Litestar:
    """The log lives on the app's own loop (litestar's test client runs the app in a portal thread)."""
    authorizer = Authorizer.open(AccessConfig(), tmp_path)

    async def startup(app: Litestar) -> None:
        log = await AuditLog.open(AuditConfig(content_default="encrypt"), tmp_path)
        for i in range(6):
            findings = (Finding(type="pii.card", count=1, action="mask"),) if i % 2 else ()
            await log.append(
                AuditEvent(
                    event_type=EventType.INFERENCE,
                    decision=Decision.ALLOW,
                    subject=f"u{i}",
                    model="m",
                    roles=("analyst",),
                    findings=findings,
                ),
                AuditContent(prompt=f"secret prompt {i}", completion="answer"),
            )
        state["log"] = log
        gatekeeper(authorizer, log).install(app.state)

    async def shutdown() -> None:
        await state["log"].close()

    return Litestar(
        route_handlers=[build_audit_router()],
        on_startup=[startup],
        on_shutdown=[shutdown],
        dependencies={"audit_log": Provide(lambda: state["log"], sync_to_thread=False)},
        exception_handlers={AuditError: _error},
    )


AUDITOR = bearer("alice", "auditor")
COMPLIANCE = bearer("carol", "compliance")
ANALYST = bearer("bob", "analyst")


def test_routes_end_to_end(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            r = await client.get(
                "/audit/records", params={"finding": "pii.card", "limit": 2}, headers=AUDITOR
            )
            assert r.status_code == 200, r.text
            page = r.json()
            assert [rec["event"]["subject"] for rec in page["records"]] == ["u1", "u3"]
            r2 = await client.get(
                "/audit/records",
                params={"finding": "pii.card", "cursor": page["next_cursor"]},
                headers=AUDITOR,
            )
            assert [rec["event"]["subject"] for rec in r2.json()["records"]] == ["u5"]
            assert "secret prompt" not in r.text

            denied = await client.get("/audit/records", headers=ANALYST)
            assert denied.status_code == 403 and denied.json()["error"]["code"] == "permission_denied"
            no_content = await client.get("/audit/records/3/content", headers=AUDITOR)
            assert no_content.status_code == 403
            content = await client.get("/audit/records/3/content", headers=COMPLIANCE)
            assert content.json() == {"prompt": "secret prompt 1", "completion": "answer"}

            agg = (await client.get("/audit/aggregates", headers=AUDITOR)).json()
            assert agg["usage"][0]["num_requests"] == 6
            assert (await client.get("/audit/verify", headers=AUDITOR)).json()["ok"] is True
            bad = await client.get("/audit/records", params={"cursor": "%%%"}, headers=AUDITOR)
            assert bad.status_code == 400

            export = await client.get("/audit/export", headers=AUDITOR)
            assert export.status_code == 200
            (tmp_path / "bundle.jsonl").write_bytes(export.content)
            pem = (await client.get("/audit/public-key", headers=AUDITOR)).content
            assert verify_bundle(tmp_path / "bundle.jsonl", CheckpointVerifier.from_pem(pem)).ok
            csv = await client.get("/audit/export", params={"format": "csv"}, headers=AUDITOR)
            assert csv.text.splitlines()[0].startswith("seq,time,event_type")

            # Every access above, and every refusal, is itself in the log.
            access = (
                await client.get("/audit/records", params={"event_type": "audit_access"}, headers=AUDITOR)
            ).json()
            denials = (
                await client.get(
                    "/audit/records", params={"event_type": "authorization_denial"}, headers=AUDITOR
                )
            ).json()
        details = [r["event"]["detail"].split(" ")[0] for r in access["records"]]
        assert details.count("search") == 4 and "content" in details and "export" in details
        assert "verify" in details and "public-key" in details
        assert [(r["event"]["subject"], r["event"]["reason"]) for r in denials["records"]] == [
            ("bob", "missing audit:read"),
            ("alice", "missing audit:content"),
        ]

    asyncio.run(go())


def test_refused_when_audit_log_cannot_record_the_access(tmp_path: Path) -> None:
    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            ok = await client.get("/audit/records/3/content", headers=COMPLIANCE)
            assert ok.status_code == 200
            # The store goes read-only: nothing can be recorded, so no content may leave either.
            db = tmp_path / "audit" / "audit.db"
            subprocess.run(["chattr", "+i", str(db), f"{db}-wal"], check=True)
            try:
                r = await client.get("/audit/records/3/content", headers=COMPLIANCE)
            finally:
                subprocess.run(["chattr", "-i", str(db), f"{db}-wal"], check=True)
            assert r.status_code == 503 and "secret" not in r.text

    asyncio.run(go())


def test_verify_endpoint_reports_an_edited_witness(tmp_path: Path) -> None:
    """/audit/verify shares the CLI's verifier: the witness is checked there too."""

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            await client.get("/audit/export", headers=AUDITOR)  # an export seals the log first
            intact = (await client.get("/audit/verify", headers=AUDITOR)).json()
            assert intact["ok"] is True and intact["witnessed_seq"] > 0 and intact["key_pinned"] is False
            witness = tmp_path / "witness" / "audit-checkpoints.jsonl"
            lines = witness.read_text().splitlines(keepends=True)
            witness.write_text("".join(lines[1:]))  # the first witnessed checkpoint removed
            edited = (await client.get("/audit/verify", headers=AUDITOR)).json()
            assert edited["ok"] is False and "witness" in edited["problem"]

    asyncio.run(go())


def test_authorization_comes_before_input_validation(tmp_path: Path) -> None:
    """A caller without audit rights gets 403 whatever it sends; only a reader learns of a 400."""
    bad = [
        ("GET", "/audit/records", {"params": {"cursor": "%%%"}}),
        ("GET", "/audit/records", {"params": {"limit": "many"}}),
        ("GET", "/audit/records", {"params": {"since": "yesterday"}}),
        ("GET", "/audit/aggregates", {"params": {"until": "tomorrow"}}),
        ("GET", "/audit/export", {"params": {"format": "xml"}}),
        ("GET", "/audit/export", {"params": {"first_seq": "one"}}),
        ("POST", "/audit/records/3/content/match", {"content": b'{"text": 5}'}),
        ("POST", "/audit/records/3/content/match", {"content": b"[" * 100_000}),
    ]

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(_app(tmp_path, state)) as client:
            for method, path, kw in bad:
                r = await client.request(method, path, headers=ANALYST, **kw)
                assert r.status_code == 403, (path, kw, r.text)
                reader = COMPLIANCE if "content" in path else AUDITOR
                r = await client.request(method, path, headers=reader, **kw)
                assert r.status_code == 400, (path, kw, r.text)

    asyncio.run(go())
