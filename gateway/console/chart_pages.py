"""Charts of the audit trail: denials and filter hits per day, requests and tokens per model and role.

Drawn on the server as SVG from ``AuditLog.aggregates`` (the numbers ``/audit/aggregates``
gives); viewing them needs ``audit:read`` and is audited like any other view of audit data.
"""

from __future__ import annotations

import time
from collections import Counter

import msgspec
from litestar import get
from litestar.params import FromQuery
from litestar.response import Template
from litestar_htmx import HTMXRequest

from audit.aggregates import AuditAggregates, DailyCount
from audit.errors import AuditQueryError
from audit.query import AuditQuery
from audit.record import us_to_iso
from gateway.console.audit_pages import page_context, within_scope
from gateway.console.bar_chart import HEIGHT, WIDTH, BarChart
from gateway.console.console import Console

__all__ = ["CHART_PAGES"]

_DEFAULT_DAYS = 30


def _per_day(counts: list[DailyCount]) -> tuple[tuple[str, float], ...]:
    days: Counter[str] = Counter()
    for count in counts:
        days[count.day] += count.count
    return tuple((day[5:], float(n)) for day, n in sorted(days.items()))


def charts_of(aggregates: AuditAggregates) -> list[BarChart]:
    usage = aggregates.usage
    return [
        BarChart("Denials per day", _per_day(aggregates.denials)),
        BarChart("Filter hits per day", _per_day(aggregates.filter_hits)),
        BarChart(
            "Requests per model and role",
            tuple((f"{u.model} · {u.role or '-'}", float(u.num_requests)) for u in usage),
        ),
        BarChart(
            "Tokens per model and role",
            tuple(
                (f"{u.model} · {u.role or '-'}", float(u.prompt_tokens + u.completion_tokens)) for u in usage
            ),
        ),
    ]


@get("/audit/charts")
async def charts_page(
    request: HTMXRequest,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
) -> Template:
    console = Console.of(request)
    since = since or us_to_iso(int((time.time() - _DEFAULT_DAYS * 86400) * 1_000_000))[:10] + "T00:00:00Z"
    problem, charts = "", list[BarChart]()
    try:
        query = msgspec.convert(
            {"since": since, "until": until or None, "tenant": tenant or None}, AuditQuery
        )
        detail = "console charts " + msgspec.json.encode(query).decode()
    except (msgspec.ValidationError, AuditQueryError) as exc:
        query, problem, detail = None, str(exc), "console charts (invalid filters)"
    session = await console.page(request, ("audit:read",), detail)
    if query is not None:
        query = await within_scope(console, request, session, query, detail)
        tenant = query.tenant
        try:
            charts = charts_of(await console.services.audit_log.aggregates(query))
        except AuditQueryError as exc:
            problem = str(exc)
    context = page_context(
        console,
        session,
        charts=charts,
        width=WIDTH,
        height=HEIGHT,
        filters={"since": since, "until": until or "", "tenant": tenant or ""},
        problem=problem,
    )
    return Template(template_name="charts.html", context=context, status_code=400 if problem else 200)


CHART_PAGES = [charts_page]
