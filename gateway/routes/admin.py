"""``/admin``: change who may use which model, live, and ask what a caller may do.

Every route's guard requires ``admin:policy`` (403 otherwise, recorded by the ``Gatekeeper``),
and a handler reaches only as far as the caller holds it (``policies.control_scope``): a tenant's
administrator reads and writes the rules of its own domain, never ``*`` or another tenant's
(403, recorded). Changes go through
``Authorizer.change``: atomic, audited with the caller as actor (fail closed), and in force on
every replica when the call returns (``policies.policy_freshness``). Malformed input answers 400 naming
the field and the rule it breaks.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery

from common.audit_sink import AuditSink
from common.principal import Principal
from gateway.gatekeeper import Gatekeeper, requires
from gateway.permission import Permission
from policies.authorizer import Authorizer
from policies.control_scope import ControlScope
from policies.errors import InvalidPolicyError, PolicyForbiddenError
from policies.policy import ALL_DOMAINS, CONTROL_RESOURCE, Assignment, Grant, user_member
from policies.policy_change import Op, PolicyChange

__all__ = ["build_admin_router"]

PrincipalDep = NamedDependency[Principal]
AuthorizerDep = NamedDependency[Authorizer]
GatekeeperDep = NamedDependency[Gatekeeper]
ScopeDep = NamedDependency[ControlScope]
# AuditSink is a Protocol, which litestar's signature model cannot isinstance-check.
AuditDep = NamedDependency[Any]

ADMIN = Permission(
    actions=("admin:policy",), refusal=lambda: PolicyForbiddenError("admin:policy permission required")
)
"""Every ``/admin`` route's permission (and ``/admin/engines``, there for the whole domain ``*``)."""


class GrantBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    role: str
    pattern: str
    action: str
    domain: str = ALL_DOMAINS


class AssignmentBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    role: str
    user: str | None = None
    """A token subject (``sub``) to give the role to."""
    member_role: str | None = None
    """A role that inherits ``role`` (role hierarchy)."""
    domain: str = ALL_DOMAINS


class CheckBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    action: str
    model: str = CONTROL_RESOURCE
    user: str | None = None
    roles: tuple[str, ...] = ()
    tenant: str | None = None


_Body = TypeVar("_Body", GrantBody, AssignmentBody, CheckBody)


async def _body(request: Request[Any, Any, Any], kind: type[_Body]) -> _Body:
    # Decoded here rather than by litestar so a malformed body answers our 400 with msgspec's words.
    try:
        return msgspec.json.decode(await request.body(), type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidPolicyError(f"invalid request body: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidPolicyError(f"request body is not valid JSON: {exc}") from None


def _grant(body: GrantBody) -> Grant:
    return Grant(role=body.role, pattern=body.pattern, action=body.action, domain=body.domain)


def _assignment(body: AssignmentBody) -> Assignment:
    if (body.user is None) == (body.member_role is None):
        raise InvalidPolicyError("give exactly one of 'user' or 'member_role'", param="user")
    member = user_member(body.user) if body.user is not None else str(body.member_role)
    return Assignment(member=member, role=body.role, domain=body.domain)


async def _change(
    request: Request[Any, Any, Any],
    principal: Principal,
    authorizer: Authorizer,
    audit: AuditSink,
    gatekeeper: Gatekeeper,
    op: Op,
) -> dict[str, Any]:
    """Parse and apply one change, only within the domain the caller administers."""
    rule: Grant | Assignment
    if op in ("grant", "ungrant"):
        rule = _grant(await _body(request, GrantBody))
    else:
        rule = _assignment(await _body(request, AssignmentBody))
    change = PolicyChange(op=op, rule=rule)
    if (refusal := authorizer.change_refusal(principal, change)) is not None:
        await gatekeeper.refuse(request, ADMIN, refusal)
    policy = await authorizer.change([change], principal.subject, audit)
    return {"version": policy.version, "applied": change.to_dict()}


@get("/policy", guards=[requires(ADMIN)])
async def get_policy(control_scope: ScopeDep, authorizer: AuthorizerDep) -> dict[str, Any]:
    """The whole policy for a global administrator; a tenant's administrator sees its domain's rules."""
    return control_scope.visible(authorizer.policy).to_dict()


@post("/grants", status_code=201, guards=[requires(ADMIN)])
async def add_grant(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit: AuditDep,
    gatekeeper: GatekeeperDep,
) -> dict[str, Any]:
    return await _change(request, principal, authorizer, audit, gatekeeper, "grant")


@post("/grants/remove", status_code=200, guards=[requires(ADMIN)])
async def remove_grant(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit: AuditDep,
    gatekeeper: GatekeeperDep,
) -> dict[str, Any]:
    return await _change(request, principal, authorizer, audit, gatekeeper, "ungrant")


@post("/assignments", status_code=201, guards=[requires(ADMIN)])
async def add_assignment(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit: AuditDep,
    gatekeeper: GatekeeperDep,
) -> dict[str, Any]:
    return await _change(request, principal, authorizer, audit, gatekeeper, "assign")


@post("/assignments/remove", status_code=200, guards=[requires(ADMIN)])
async def remove_assignment(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit: AuditDep,
    gatekeeper: GatekeeperDep,
) -> dict[str, Any]:
    return await _change(request, principal, authorizer, audit, gatekeeper, "unassign")


@get("/permissions", guards=[requires(ADMIN)])
async def permissions(
    request: Request[Any, Any, Any],
    control_scope: ScopeDep,
    authorizer: AuthorizerDep,
    gatekeeper: GatekeeperDep,
    user: FromQuery[str | None] = None,
    role: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
) -> dict[str, Any]:
    """Effective roles and grants of one user (its policy-assigned roles only) or one role, in
    ``tenant`` (default: the caller's own domain)."""
    domain = tenant or str(control_scope.domain)
    await gatekeeper.require_domain(request, ADMIN, control_scope, domain)
    if (user is None) == (role is None):
        raise InvalidPolicyError("give exactly one of the query parameters 'user' or 'role'", param="user")
    member = user_member(user) if user is not None else str(role)
    return {
        "member": member,
        "domain": domain,
        "version": authorizer.version,
        "roles": authorizer.effective_roles([member], domain),
        "grants": [msgspec.to_builtins(g) for g in authorizer.effective_grants([member], domain)],
    }


@post("/check", status_code=200, guards=[requires(ADMIN)])
async def check(
    request: Request[Any, Any, Any],
    control_scope: ScopeDep,
    authorizer: AuthorizerDep,
    gatekeeper: GatekeeperDep,
) -> dict[str, Any]:
    """Dry run: would a caller with this subject, token roles and tenant be allowed? A tenant's
    administrator asks about callers of its tenant (the default when ``tenant`` is left out)."""
    data = await _body(request, CheckBody)
    tenant = data.tenant if data.tenant is not None or control_scope.is_global else control_scope.domain
    await gatekeeper.require_domain(request, ADMIN, control_scope, tenant or ALL_DOMAINS)
    if data.user is None and not data.roles:
        raise InvalidPolicyError("give 'user', 'roles' or both", param="user")
    # No user: judge the token roles alone, not whatever an empty subject might be assigned.
    caller = Principal(subject=data.user or "\0", roles=data.roles, issuer="dry-run", tenant=tenant)
    return {
        "allowed": authorizer.allowed(caller, data.action, data.model),
        "version": authorizer.version,
        "effective_roles": authorizer.effective_roles(
            authorizer.members_of(caller), authorizer.domain_of(caller)
        ),
    }


def build_admin_router() -> Router:
    """The ``/admin`` router; the app provides ``authorizer`` and ``audit``, and installs a
    ``Gatekeeper``."""
    return Router(
        path="/admin",
        dependencies=Gatekeeper.dependencies(),
        route_handlers=[
            get_policy,
            add_grant,
            remove_grant,
            add_assignment,
            remove_assignment,
            permissions,
            check,
        ],
    )
