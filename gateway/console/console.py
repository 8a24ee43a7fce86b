"""What the console holds for the gateway's lifetime, and the check every console page runs first.

    request -> session cookie -> SessionStore (idle/absolute time-outs) -> Authorizer (the API's
    permissions) -> an audit record with the officer's identity, durable before the page renders

A refused page is audited too (``authorization_denial``). State-changing requests (POST) must
carry the session's CSRF token and, when the browser sends one, a same-origin ``Origin``.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from litestar import Request

from common.audit_event import Decision, EventType
from gateway.console.config import ConsoleConfig
from gateway.console.errors import CsrfError, NotSignedInError, PageForbiddenError, PageNotFoundError
from gateway.console.language import text
from gateway.console.oidc_client import OidcClient
from gateway.console.pending_sign_ins import PendingSignIns
from gateway.console.session_store import ConsoleSession, SessionStore, open_session_store
from gateway.request_context import request_context

if TYPE_CHECKING:
    from common.principal import Principal
    from gateway.services import Services
    from policies.control_scope import ControlScope

__all__ = ["SESSION_COOKIE", "STATE_COOKIE", "Console"]

SESSION_COOKIE = "strongroom_console"
STATE_COOKIE = "strongroom_console_state"
CONTROL_PLANE = "*"


class Console:
    def __init__(
        self,
        cfg: ConsoleConfig,
        services: Services,
        *,
        is_tls: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = cfg
        self.services = services
        access = services.settings.access
        shared_db = access.postgres_dsn if access.backend == "postgres" else None
        self.sessions: SessionStore = open_session_store(cfg, services.redis, clock, postgres_dsn=shared_db)
        self.pending = PendingSignIns()
        settings = services.settings
        self.oidc = OidcClient(cfg, settings.auth, services.verifier) if cfg.has_oidc else None
        self.is_dev_sign_in = cfg.dev_sign_in and settings.auth.dev_issuer
        self.secure_cookies = is_tls if cfg.secure_cookies is None else cfg.secure_cookies
        self.key_rotation = asyncio.Lock()
        """One rotation at a time from this replica's console (a second waits, then finds its
        typed version stale)."""

    @classmethod
    def create(cls, services: Services) -> Console | None:
        """The console for these services, or None when ``console.enabled`` is off."""
        cfg: ConsoleConfig = services.settings.console
        if not cfg.enabled:
            return None
        return cls(cfg, services, is_tls=services.settings.server.tls.cert_file is not None)

    async def aclose(self) -> None:
        await self.sessions.aclose()

    @staticmethod
    def of(request: Request[Any, Any, Any]) -> Console:
        console: Console | None = getattr(request.app.state, "console", None)
        if console is None:
            raise PageNotFoundError(text("the console is disabled"))
        return console

    async def session(self, request: Request[Any, Any, Any]) -> ConsoleSession:
        session_id = request.cookies.get(SESSION_COOKIE)
        session = await self.sessions.get(session_id)
        if session is None:
            raise NotSignedInError("no live session")
        if await self.services.verifier.is_revoked(session.principal, since=session.created_at):
            # Revoking the officer's token (or subject) ends the console session too, at the next click.
            await self.sessions.end(session_id)
            await self.record(
                request,
                session.principal,
                EventType.AUTHENTICATION_FAILURE,
                Decision.DENY,
                status=401,
                reason="console session ended: token revoked",
            )
            raise NotSignedInError("token revoked")
        if request.method not in ("GET", "HEAD"):
            await check_csrf(request, session.csrf_token)
        return session

    async def page(
        self,
        request: Request[Any, Any, Any],
        permissions: tuple[str, ...],
        detail: str,
        *,
        is_audited: bool = True,
        every_tenant: bool = False,
    ) -> ConsoleSession:
        """The session, after checking ``permissions`` and recording this view (or its refusal).

        Permissions reach as far as they do through the API (``policies.control_scope``): a page
        shows one tenant's data to an officer scoped to that tenant; ``every_tenant`` pages (the
        whole chain: verify, export) need the permissions across all tenants.
        ``is_audited=False`` records refusals only: for live refreshes of views holding no audit
        data (the engine pool every few seconds would otherwise flood the log)."""
        session = await self.session(request)
        authorizer = self.services.authorizer
        await authorizer.current()
        missing = [p for p in permissions if not authorizer.allowed(session.principal, p, CONTROL_PLANE)]
        if missing:
            await self.refuse(request, session, "missing " + ",".join(missing), detail)
            raise PageForbiddenError(text("this page needs {permissions}", permissions=", ".join(missing)))
        if every_tenant and not self.scope(session, *permissions).is_global:
            await self.refuse(request, session, f"{','.join(permissions)} not held in every tenant", detail)
            raise PageForbiddenError(text("this page covers every tenant's records"))
        if not is_audited:
            return session
        await self.record(
            request, session.principal, EventType.AUDIT_ACCESS, Decision.ALLOW, status=200, detail=detail
        )
        return session

    def scope(self, session: ConsoleSession, *permissions: str) -> ControlScope:
        """Where the officer holds ``permissions``: every tenant, or its token's one."""
        return self.services.authorizer.control_scope(session.principal, *permissions)

    async def refuse(
        self, request: Request[Any, Any, Any], session: ConsoleSession, reason: str, detail: str
    ) -> None:
        """Record a refusal (403) with the officer's identity; the caller raises."""
        await self.record(
            request,
            session.principal,
            EventType.AUTHORIZATION_DENIAL,
            Decision.DENY,
            status=403,
            reason=reason,
            detail=detail,
        )

    def can(self, session: ConsoleSession, permission: str) -> bool:
        return self.services.authorizer.allowed(session.principal, permission, CONTROL_PLANE)

    async def record(
        self,
        request: Request[Any, Any, Any],
        principal: Principal | None,
        event_type: EventType,
        decision: Decision,
        *,
        status: int,
        reason: str = "",
        detail: str = "",
    ) -> int:
        # The request's own context: the record counts as its one record (RequestMiddleware).
        ctx = request_context(request.scope, f"{request.method} {request.url.path}")  # type: ignore[arg-type]
        if principal is not None:
            ctx.principal = principal
        auditor = self.services.inference.auditor
        return await auditor.record(ctx, event_type, decision, status=status, reason=reason, detail=detail)


async def check_csrf(request: Request[Any, Any, Any], expected: str) -> None:
    """Raise ``CsrfError`` unless the request carries ``expected`` (form field ``_csrf`` or header
    ``X-CSRF-Token``) and, when the browser names one, comes from this origin."""
    origin = request.headers.get("origin")
    if origin is not None and origin != _own_origin(request):
        raise CsrfError(text("cross-origin form"))
    given = request.headers.get("x-csrf-token")
    if given is None:
        form = await request.form()
        value = form.get("_csrf")
        given = value if isinstance(value, str) else None
    if not given or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise CsrfError(text("missing or wrong CSRF token"))


def _own_origin(request: Request[Any, Any, Any]) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"
