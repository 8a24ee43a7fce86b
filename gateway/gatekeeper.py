"""The control plane's door (``/admin``, ``/audit``): the one place its permissions are decided
and its refusals recorded.

    route guard (``requires(Permission)``, one per route) ─▶ Gatekeeper.admit
        authenticate (401, audited) ─▶ Authorizer.control_scope(actions) ─▶ covers the domain?
        no  ─▶ AUTHORIZATION_DENIAL through the Auditor, then 403 (503 if it cannot be recorded)
        yes ─▶ the ControlScope is kept on the request; the handler asks for it (``control_scope``)

A refusal only the handler can see (a rule outside the caller's domain, once the body is read;
a record of another tenant) goes through ``refuse``: the same record, the same answer. Nothing
about the request's input is judged before the guard, so a caller without the right gets 403
whatever it sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from litestar import Request
from litestar.datastructures import State
from litestar.di import Provide
from litestar.handlers.base import BaseRouteHandler

from common.audit_event import Decision, EventType
from common.principal import Principal
from gateway.auditor import Auditor
from gateway.authenticator import Authenticator
from gateway.permission import Connection, Permission
from gateway.request_context import request_context
from policies.authorizer import Authorizer
from policies.control_scope import ControlScope

__all__ = ["Gatekeeper", "requires"]

Guard = Callable[[Connection, BaseRouteHandler], Awaitable[None]]

_STATE_KEY = "gatekeeper"
_SCOPE_KEY = "strongroom.control_scope"


class Gatekeeper:
    """Authenticates, decides and records for every guarded route of one app."""

    def __init__(self, authenticator: Authenticator, authorizer: Authorizer, auditor: Auditor) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.auditor = auditor

    def install(self, state: State) -> None:
        """Make this the gatekeeper of the app whose state this is (at start-up)."""
        state[_STATE_KEY] = self

    @staticmethod
    def of(connection: Connection) -> Gatekeeper:
        gatekeeper = connection.app.state.get(_STATE_KEY)
        if not isinstance(gatekeeper, Gatekeeper):
            # Deny rather than serve a guarded route without its checks.
            raise RuntimeError("no Gatekeeper is installed on this app")
        return gatekeeper

    async def principal(self, connection: Connection) -> Principal:
        return await self.authenticator.caller_of(connection)

    async def admit(self, connection: Connection, permission: Permission) -> ControlScope:
        """The caller's reach for ``permission``; refuses (recorded, then 403) when it has none
        or, where the permission names a domain, when that domain is out of reach."""
        principal = await self.principal(connection)
        await self.authorizer.current()
        scope = self.authorizer.control_scope(principal, *permission.actions)
        if scope.is_empty:
            missing = [a for a in permission.actions if not self.authorizer.holds(principal, a)]
            await self.refuse(connection, permission, "missing " + ",".join(missing))
        domain = permission.domain(connection) if permission.domain is not None else None
        if domain is not None:
            await self.require_domain(connection, permission, scope, domain)
        connection.scope.setdefault("state", {})[_SCOPE_KEY] = scope
        return scope

    async def require_domain(
        self,
        connection: Connection,
        permission: Permission,
        scope: ControlScope,
        domain: str,
    ) -> None:
        """Refuse unless ``scope`` reaches the rules or records of ``domain``."""
        if not scope.covers(domain):
            await self.refuse(
                connection, permission, f"{','.join(permission.actions)} not held in domain {domain!r}"
            )

    async def refuse(self, connection: Connection, permission: Permission, reason: str) -> NoReturn:
        """Record the refusal before it is answered (fail closed: 503 when it cannot be), then 403."""
        ctx = request_context(connection.scope)  # type: ignore[arg-type]
        await self.auditor.record(
            ctx,
            EventType.AUTHORIZATION_DENIAL,
            Decision.DENY,
            status=403,
            reason=reason,
            endpoint=permission.endpoint(connection),
            detail=permission.detail(connection),
        )
        raise permission.refusal()

    async def record_access(self, connection: Connection, permission: Permission) -> None:
        """Record an admitted read of the audit log as the answer starts, with its status."""
        await self.auditor.record_on_answer(
            request_context(connection.scope),  # type: ignore[arg-type]
            EventType.AUDIT_ACCESS,
            Decision.ALLOW,
            status=200,
            endpoint=permission.endpoint(connection),
            detail=permission.detail(connection),
        )

    @staticmethod
    def dependencies() -> dict[str, Provide]:
        """What a guarded router's handlers may ask for: ``principal``, ``gatekeeper`` and
        ``control_scope`` (the ControlScope their guard admitted the request with)."""
        return {
            "principal": Provide(_principal),
            "gatekeeper": Provide(_gatekeeper, sync_to_thread=False),
            "control_scope": Provide(_admitted_scope, sync_to_thread=False),
        }


async def _principal(request: Request[Any, Any, Any]) -> Principal:
    return await Gatekeeper.of(request).principal(request)


def _gatekeeper(request: Request[Any, Any, Any]) -> Gatekeeper:
    return Gatekeeper.of(request)


def _admitted_scope(request: Request[Any, Any, Any]) -> ControlScope:
    scope = request.scope.get("state", {}).get(_SCOPE_KEY)
    if not isinstance(scope, ControlScope):
        # A handler that asks for a scope without a guard declaring its permission is a bug.
        raise RuntimeError(f"{request.url.path} has no permission guard")
    return scope


def requires(permission: Permission) -> Guard:
    """The litestar guard of a route that needs ``permission``."""

    async def guard(connection: Connection, _: BaseRouteHandler) -> None:
        await Gatekeeper.of(connection).admit(connection, permission)

    return guard
