"""The console in-process on real parts, for the console's unit tests: AuditLog (temp SQLite),
Authorizer (default policy), TokenVerifier with the dev issuer, the gateway's Auditor, Quotas;
with ``redis_prefix``, sessions and quota overrides in the real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import redis.asyncio
from litestar import Litestar

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.query import AuditQuery
from audit.record import AuditContent
from common.audit_event import AuditEvent, Decision, EventType
from common.finding import Finding
from gateway.auditor import Auditor
from gateway.auth.config import AuthConfig, IssuerConfig
from gateway.auth.dev_issuer import DevIssuer
from gateway.auth.token_verifier import TokenVerifier
from gateway.console.config import ConsoleConfig
from gateway.console.console import Console
from gateway.console.router import build_console_router, console_template_config
from gateway.engine_pool import EnginePool
from gateway.quota import QuotaConfig, Quotas
from policies.authorizer import Authorizer
from policies.config import AccessConfig
from strongroom.config import Settings

__all__ = ["IDP", "XSS", "console_app", "details", "rows", "sign_in"]

IDP = "https://idp.bank.example/realms/staff"
XSS = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


def console_app(
    tmp_path: Path,
    state: dict[str, Any],
    *,
    secure_cookies: bool | None = None,
    seed: Callable[[AuditLog, Authorizer], Awaitable[None]] | None = None,
    redis_prefix: str | None = None,
    postgres_schema: str | None = None,
    engines: EnginePool | None = None,
) -> Litestar:
    """``postgres_schema``: the gateway's policy backend is PostgreSQL (so, without Redis, console
    sessions live there, in this schema); the test's own Authorizer stays on SQLite."""
    settings = Settings(
        data_dir=str(tmp_path),
        auth=AuthConfig(
            issuers=(IssuerConfig(issuer=IDP, audiences=("console",), jwks_url=f"{IDP}/jwks"),),
        ),
        console=ConsoleConfig(
            oidc_issuer=IDP,
            oidc_client_id="console",
            oidc_redirect_url="https://llm.example/console/callback",
            secure_cookies=secure_cookies,
            session_key_prefix=f"{redis_prefix}:session" if redis_prefix else "strongroom:console:session",
            session_postgres_schema=postgres_schema or "console",
        ),
        access=AccessConfig(backend="postgres", postgres_dsn=POSTGRES_DSN)
        if postgres_schema
        else AccessConfig(),
        quota=QuotaConfig(key_prefix=f"{redis_prefix}:quota") if redis_prefix else QuotaConfig(),
    )

    async def startup(app: Litestar) -> None:
        log = await AuditLog.open(AuditConfig(content_default="encrypt"), tmp_path)
        await log.append(
            AuditEvent(
                event_type=EventType.INFERENCE,
                decision=Decision.ALLOW,
                subject=XSS,
                model=XSS,
                roles=("analyst",),
                reason=XSS,
                findings=(Finding(type="pii.card", count=1, action="mask"),),
            ),
            AuditContent(prompt=f"card 4111 1111 1111 1111 {XSS}", completion="ok"),
        )
        client = redis.asyncio.Redis.from_url(REDIS_URL) if redis_prefix else None
        services = SimpleNamespace(
            settings=settings,
            verifier=TokenVerifier.create(settings.auth, tmp_path, redis=None),
            authorizer=Authorizer.open(AccessConfig(), tmp_path),
            audit_log=log,
            redis=client,
            quotas=Quotas(settings.quota, redis=client),
            engines=engines or EnginePool([]),  # no engine: the grant matrix lists no model
            inference=SimpleNamespace(auditor=Auditor(log)),
        )
        app.state.services = services
        app.state.console = Console.create(services)  # type: ignore[arg-type]
        state["log"] = log
        state["verifier"] = services.verifier
        state["authorizer"] = services.authorizer
        state["services"] = services
        if seed is not None:  # on the app's loop, where the log's writer runs
            await seed(log, services.authorizer)

    async def shutdown() -> None:
        await app.state.console.aclose()
        await state["verifier"].aclose()
        await state["log"].close()
        client = state["services"].redis
        if client is not None:
            keys = [k async for k in client.scan_iter(f"{redis_prefix}:*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()

    app = Litestar(
        route_handlers=[build_console_router()],
        template_config=console_template_config(),
        on_startup=[startup],
        on_shutdown=[shutdown],
    )
    return app


async def sign_in(
    client: httpx.AsyncClient,
    tmp_path: Path,
    sub: str,
    *roles: str,
    tenant: str | None = None,
    headers: dict[str, str] | None = None,
) -> str:
    """Dev-token sign-in; returns the session's CSRF token ("" when the role may not see the search page)."""
    page = await client.get("/console/sign-in", headers=headers)
    login_csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text)
    assert login_csrf is not None
    token = DevIssuer.load_or_create(tmp_path).mint(sub, roles, tenant=tenant)
    signed_in = await client.post(
        "/console/sign-in/dev", data={"_csrf": login_csrf.group(1), "token": token}, follow_redirects=False
    )
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console/audit", signed_in.text
    home = await client.get("/console/audit")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', home.text)
    return csrf.group(1) if csrf else ""


async def details(log: AuditLog, subject: str) -> list[tuple[str, str, str]]:
    """(event type, detail, reason) of every record with ``subject``, oldest first."""
    page = await log.search(AuditQuery(subject=subject, limit=1000))
    return [(str(r.event.event_type), r.event.detail, r.event.reason) for r in page.records]


def rows(html: str, testid: str) -> list[str]:
    """The text of each body row of the table marked ``testid``, tags dropped, spaces collapsed."""
    body = html.split(f'data-testid="{testid}"', 1)[1].split("</table>", 1)[0]
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for row in body.split("<tr>")[2:]]
