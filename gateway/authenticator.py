"""Who is calling: a bearer token turned into a ``Principal`` once per request, or a 401 on record.

Every authenticated route (the OpenAI endpoints, ``/admin``, ``/audit``) asks ``caller``; the
first ask verifies the token and keeps the principal on the request's context, later asks (a
guard, then the handler's ``principal`` dependency) read it back. ``/metrics`` asks ``scraper``:
its static scrape token (see ``gateway.metrics_access``) opens nothing else. A refusal is
recorded through the ``Auditor`` before it is answered; if it cannot be, the answer is 503.
"""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection

from common.audit_event import Decision, EventType
from common.principal import Principal
from gateway.auditor import Auditor
from gateway.auth import AuthenticationError, RevocationUnavailableError, TokenVerifier
from gateway.errors import UnauthenticatedError
from gateway.metrics_access import MetricsAccess
from gateway.request_context import RequestContext, request_context
from gateway.stage_timer import StageTimer, now_ns

__all__ = ["Authenticator"]

_SCRAPE_REFUSAL = "metrics: missing or wrong scrape token"


class Authenticator:
    def __init__(
        self,
        verifier: TokenVerifier,
        metrics_access: MetricsAccess,
        auditor: Auditor,
        stages: StageTimer | None = None,
    ) -> None:
        """``stages``: where the time a verification takes is observed (stage ``auth``)."""
        self.verifier = verifier
        self.metrics_access = metrics_access
        self.auditor = auditor
        self._stages = stages

    async def caller(self, ctx: RequestContext, authorization: str | None) -> Principal:
        """The verified caller of the request (verified on the first ask); raises
        UnauthenticatedError (401) or RevocationUnavailableError (503), both audited."""
        if ctx.principal is not None:
            return ctx.principal
        started_ns = now_ns()
        try:
            ctx.principal = await self.verifier.verify(authorization)
            if self._stages is not None:
                self._stages.done("auth", "", started_ns)
        except AuthenticationError as exc:
            await self.auditor.record(
                ctx, EventType.AUTHENTICATION_FAILURE, Decision.DENY, status=401, reason=exc.reason
            )
            raise UnauthenticatedError(exc.reason) from None
        except RevocationUnavailableError as exc:
            await self.auditor.record(
                ctx, EventType.AUTHENTICATION_FAILURE, Decision.ERROR, status=503, reason=exc.message
            )
            raise
        return ctx.principal

    async def scraper(self, ctx: RequestContext, authorization: str | None) -> None:
        """Admit a /metrics scrape; raises UnauthenticatedError (401, audited) otherwise."""
        if self.metrics_access.allows(authorization):
            return
        await self.auditor.record(
            ctx, EventType.AUTHENTICATION_FAILURE, Decision.DENY, status=401, reason=_SCRAPE_REFUSAL
        )
        raise UnauthenticatedError(_SCRAPE_REFUSAL)

    async def caller_of(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        """``caller`` for a control-plane request, its context labelled with the request's path."""
        ctx = request_context(connection.scope, connection.url.path)  # type: ignore[arg-type]
        return await self.caller(ctx, connection.headers.get("authorization"))
