"""The administrator's pages: the roles × models grant matrix and user-to-role assignments with
live edits, the recent policy changes (from the audit log, scoped like the rest), and the
engine pool.

Needs ``admin:policy``, like ``/admin``. An edit is one ``PolicyChange`` through
``Authorizer.change``: atomic, recorded as ``admin_change`` with the officer as actor (fail
closed), and in effect on this replica at once. The engine pool refreshes itself every few
seconds through htmx; those refreshes are not audited (they show no audit data), refusals are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import get, post
from litestar.params import FromQuery
from litestar.response import Redirect, Template
from litestar_htmx import HTMXRequest

from common.principal import Principal
from gateway.console.console import Console
from gateway.console.language import text
from gateway.console.policy_history import PolicyHistory
from gateway.console.session_store import ConsoleSession
from policies.errors import PolicyError
from policies.policy import ALL_DOMAINS, INFERENCE_ACTIONS, USER_PREFIX, Assignment, Grant, user_member
from policies.policy_change import PolicyChange

__all__ = ["ADMIN_PAGES"]

_ADMIN = ("admin:policy",)
_ACTIONS = tuple(sorted(INFERENCE_ACTIONS))
_DONE = {
    "grant": "Version {version}: {who} granted {action} on {model} to {role}.",
    "ungrant": "Version {version}: {who} revoked {action} on {model} from {role}.",
    "assign": "Version {version}: {who} assigned {role} to {user}.",
    "unassign": "Version {version}: {who} unassigned {role} from {user}.",
}


def _cell(console: Console, role: str, model: str, action: str, direct: frozenset[Grant]) -> str:
    """``direct`` (a grant of exactly this model, removable here), ``effective`` (through a pattern
    or an inherited role) or ``none``."""
    if Grant(role=role, pattern=model, action=action, domain=ALL_DOMAINS) in direct:
        return "direct"
    # A subject no token can carry, so only the role's own grants count.
    probe = Principal(subject="\0", roles=(role,), issuer="console-matrix")
    return "effective" if console.services.authorizer.allowed(probe, action, model) else "none"


def _matrix_context(
    console: Console, session: ConsoleSession, action: str, *, notice: str = "", problem: str = ""
) -> dict[str, Any]:
    policy = console.services.authorizer.policy
    models = sorted(console.services.engines.models())
    roles = sorted(
        {g.role for g in policy.grants if g.action in INFERENCE_ACTIONS}
        | {a.role for a in policy.assignments}
    )
    cells = {(r, m): _cell(console, r, m, action, policy.grants) for r in roles for m in models}
    return {
        "me": session.principal,
        "csrf": session.csrf_token,
        "can_content": console.can(session, "audit:content"),
        "can_admin": True,
        "action": action,
        "actions": _ACTIONS,
        "roles": roles,
        "models": models,
        "cells": cells,
        "version": policy.version,
        "notice": notice,
        "problem": problem,
    }


@get("/admin")
async def admin_page(request: HTMXRequest, action: FromQuery[str] = "chat") -> Template:
    console = Console.of(request)
    action = action if action in INFERENCE_ACTIONS else "chat"
    session = await console.page(request, _ADMIN, f"console admin {action}")
    context = _matrix_context(console, session, action)
    # The engine pool spans every tenant: shown to administrators of every tenant, as /admin/engines.
    every_tenant = console.scope(session, *_ADMIN).is_global
    context["engines"] = await _engines(console) if every_tenant else []
    context["assignments"] = _assignments(console, session)
    scope = console.scope(session, *_ADMIN)
    context["history"] = await PolicyHistory.recent(console.services.audit_log, scope)
    context["can_keys"] = console.scope(session, "admin:keys").is_global
    return Template(template_name="admin.html", context=context)


@post("/admin/grants", status_code=200)
async def change_grant(request: HTMXRequest) -> Template | Redirect:
    """Grant or revoke ``action`` on one model for one role, then show the new matrix."""
    console = Console.of(request)
    form = await request.form()
    fields = {name: str(form.get(name) or "").strip() for name in ("op", "role", "model", "action")}
    action = fields["action"] if fields["action"] in INFERENCE_ACTIONS else "chat"
    detail = f"console {fields['op'] or 'change'} {fields['role']!r} {action} {fields['model']!r}"
    session = await console.page(request, _ADMIN, detail)
    notice, problem = await _apply(
        request,
        console,
        session,
        fields["op"],
        ("grant", "ungrant"),
        lambda: Grant(
            role=fields["role"], pattern=fields["model"], action=action, domain=_domain_of(session)
        ),
        {"action": action, "model": fields["model"], "role": fields["role"]},
    )
    if not request.htmx:
        return Redirect(f"/console/admin?action={action}", status_code=303)
    context = _matrix_context(console, session, action, notice=notice, problem=problem)
    return Template(template_name="grant_matrix.html", context=context, status_code=400 if problem else 200)


@post("/admin/assignments", status_code=200)
async def change_assignment(request: HTMXRequest) -> Template | Redirect:
    """Give a user (a token ``sub``) a role, or take it away, in the administrator's own domain."""
    console = Console.of(request)
    form = await request.form()
    fields = {name: str(form.get(name) or "").strip() for name in ("op", "user", "role")}
    session = await console.page(
        request, _ADMIN, f"console {fields['op'] or 'change'} {fields['user']!r} {fields['role']!r}"
    )
    domain = _domain_of(session)
    notice, problem = await _apply(
        request,
        console,
        session,
        fields["op"],
        ("assign", "unassign"),
        lambda: Assignment(member=user_member(fields["user"]), role=fields["role"], domain=domain),
        {"role": fields["role"], "user": fields["user"]},
    )
    if not request.htmx:
        return Redirect("/console/admin", status_code=303)
    context = {
        "csrf": session.csrf_token,
        "assignments": _assignments(console, session),
        "notice": notice,
        "problem": problem,
    }
    return Template(template_name="assignments.html", context=context, status_code=400 if problem else 200)


def _domain_of(session: ConsoleSession) -> str:
    """Where an administrator's changes go: its token's tenant, or every tenant without one."""
    return session.principal.tenant or ALL_DOMAINS


async def _apply(
    request: HTMXRequest,
    console: Console,
    session: ConsoleSession,
    op: str,
    ops: tuple[str, str],
    rule: Callable[[], Grant | Assignment],
    what: dict[str, str],
) -> tuple[str, str]:
    """One audited policy change by this officer: (notice, problem) for the page. The API's rule
    decides whether it may (``Authorizer.change_refusal``: its own domain, no escalation)."""
    try:
        if op not in ops:
            raise PolicyError(text("op must be {one} or {other}", one=ops[0], other=ops[1]))
        change = PolicyChange(op=op, rule=rule())  # type: ignore[arg-type]
        refusal = console.services.authorizer.change_refusal(session.principal, change)
        if refusal is not None:
            await console.refuse(request, session, refusal, f"console {op} {change.describe()}")
            return "", text("Refused: {reason}.", reason=refusal)
        updated = await console.services.authorizer.change(
            [change], session.principal.subject, console.services.audit_log
        )
    except PolicyError as exc:
        return "", exc.message
    return text(_DONE[op], version=updated.version, who=session.principal.subject, **what), ""


def _assignments(console: Console, session: ConsoleSession) -> list[tuple[str, str, str]]:
    """(user, role, domain) of every user assignment the administrator's domain covers."""
    domain = session.principal.tenant
    return sorted(
        (a.member[len(USER_PREFIX) :], a.role, a.domain)
        for a in console.services.authorizer.policy.assignments
        if a.member.startswith(USER_PREFIX) and (domain is None or a.domain == domain)
    )


@get("/admin/engines")
async def engines_fragment(request: HTMXRequest) -> Template:
    console = Console.of(request)
    await console.page(request, _ADMIN, "console engines", is_audited=False, every_tenant=True)
    context = {"engines": await _engines(console)}
    return Template(template_name="engines.html", context=context)


async def _engines(console: Console) -> list[dict[str, object]]:
    await console.services.engines.refresh()
    return console.services.engines.describe()


ADMIN_PAGES = [admin_page, change_grant, change_assignment, engines_fragment]
