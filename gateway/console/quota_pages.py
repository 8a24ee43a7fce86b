"""Quotas per role or user under ``/console/admin/quotas``: the configured limits (read-only) and
the run-time overrides administrators set (``gateway.quota.quota_overrides``).

Same permission and reach as policy edits (``admin:policy``, ``policies.control_scope``): an
administrator of every tenant sets overrides for ``*`` or any tenant; a tenant's administrator
only for its own tenant, and no higher than what the role or user gets in every tenant (no
escalation: the engines are shared). Refusals are recorded. Each change is an ``admin_change`` record with
the administrator as subject, durable before the override is written (fail closed), and in force
on this replica at once and on the others within a second.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import get, post
from litestar.response import Template
from litestar_htmx import HTMXRequest

from common.audit_event import Decision, EventType
from gateway.console.console import Console
from gateway.console.language import text
from gateway.console.policy_history import QUOTA_CHANGE_PREFIX
from gateway.console.session_store import ConsoleSession
from gateway.quota.config import QuotaLimits
from gateway.quota.quota_overrides import QuotaOverride
from policies.control_scope import ControlScope
from policies.policy import ALL_DOMAINS

__all__ = ["QUOTA_PAGES"]

_ADMIN = ("admin:policy",)
FIELDS = QuotaLimits.__struct_fields__


def _context(console: Console, session: ConsoleSession, **extra: Any) -> dict[str, Any]:
    scope = console.scope(session, *_ADMIN)
    quotas = console.services.quotas
    config = quotas.config
    return {
        "me": session.principal,
        "csrf": session.csrf_token,
        "can_content": console.can(session, "audit:content"),
        "can_admin": True,
        "fields": FIELDS,
        "default": config.default,
        "configured": [("role", n, lv) for n, lv in sorted(config.roles.items())]
        + [("user", n, lv) for n, lv in sorted(config.subjects.items())],
        "overrides": [o for o in quotas.overrides.all() if scope.covers(o.domain)],
        "is_global": scope.is_global,
        "own_domain": scope.domain or ALL_DOMAINS,
        "notice": "",
        "problem": "",
        **extra,
    }


@get("/admin/quotas")
async def quotas_page(request: HTMXRequest) -> Template:
    console = Console.of(request)
    session = await console.page(request, _ADMIN, "console quotas")
    await console.services.quotas.overrides.refresh(force=True)
    return Template(template_name="quotas.html", context=_context(console, session))


@post("/admin/quotas", status_code=200)
async def change_quota(request: HTMXRequest) -> Template:
    """Set one role's or user's limits in one domain (blank fields fall through; all blank: remove)."""
    console = Console.of(request)
    form = await request.form()
    given = {k: str(form.get(k) or "").strip() for k in ("kind", "name", "domain", *FIELDS)}
    session = await console.page(request, _ADMIN, f"console quota {given['kind']} {given['name']!r}")
    scope = console.scope(session, *_ADMIN)
    domain = given["domain"] or str(scope.domain or ALL_DOMAINS)
    try:
        override = msgspec.convert(
            {
                "kind": given["kind"],
                "name": given["name"],
                "domain": domain,
                "limits": {f: _number(f, given[f]) for f in FIELDS if given[f]},
            },
            QuotaOverride,
        )
    except (msgspec.ValidationError, ValueError) as exc:
        problem = text("Not changed: {reason}", reason=str(exc))
        return Template(
            template_name="quotas.html", context=_context(console, session, problem=problem), status_code=400
        )
    reason = _refusal(console, scope, override)
    if reason is not None:
        await console.refuse(request, session, reason, f"{QUOTA_CHANGE_PREFIX}{override.describe()}")
        problem = text("Refused: {reason}.", reason=reason)
        return Template(
            template_name="quotas.html", context=_context(console, session, problem=problem), status_code=403
        )
    await console.record(
        request,
        session.principal,
        EventType.ADMIN_CHANGE,
        Decision.ALLOW,
        status=200,
        detail=f"{QUOTA_CHANGE_PREFIX}{override.describe()}",
    )
    await console.services.quotas.overrides.put(override)
    who = session.principal.subject
    if all(getattr(override.limits, f) is None for f in FIELDS):
        what = f"{override.kind} {override.name} in {override.domain}"
        notice = text("{who} removed the quota override of {what}.", who=who, what=what)
    else:
        notice = text("{who} set quota: {what}.", who=who, what=override.describe())
    return Template(template_name="quotas.html", context=_context(console, session, notice=notice))


def _refusal(console: Console, scope: ControlScope, override: QuotaOverride) -> str | None:
    """Why this administrator may not set ``override`` (None: it may). As for policy edits: only
    within its reach; and no escalation: a tenant's administrator shares the gateway's capacity
    with every other tenant, so it may lower limits in its tenant, not raise them above what the
    role or user gets in every tenant."""
    if not scope.covers(override.domain):
        return f"admin:policy not held in domain {override.domain!r}"
    if scope.is_global:
        return None
    ceiling = console.services.quotas.every_tenant_limits(override.kind, override.name)
    over = [
        f"{f} {getattr(override.limits, f)} > {getattr(ceiling, f)}"
        for f in FIELDS
        if getattr(override.limits, f) is not None and getattr(override.limits, f) > getattr(ceiling, f)
    ]
    return f"above the every-tenant limits: {', '.join(over)}" if over else None


def _number(field: str, value: str) -> int:
    if not value.isdigit():
        raise ValueError(
            text(
                "{field} must be a whole number >= 1 (or left blank), not {value!r}",
                field=field,
                value=value[:32],
            )
        )
    return int(value)


QUOTA_PAGES = [quotas_page, change_quota]
