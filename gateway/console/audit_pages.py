"""The compliance officer's pages: search, a record, its content, chain verification, export.

Thin handlers over ``AuditLog``'s query API (the same calls as ``/audit``). Every page that shows
audit data goes through ``Console.page``, which checks ``audit:read`` (and ``audit:content`` for
content) and records the view before anything is read.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec
from litestar import Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Template
from litestar_htmx import HTMXRequest, HTMXTemplate

from audit.bundle import write_csv
from audit.errors import AuditError, AuditNotFoundError, AuditQueryError
from audit.query import AuditQuery
from audit.record import AuditRecord
from audit.selection_bundle import Selection, export_selection, matching_rows
from common.audit_event import Decision, EventType
from gateway.console.console import Console
from gateway.console.errors import PageForbiddenError, PageNotFoundError
from gateway.console.language import text
from gateway.console.session_store import ConsoleSession
from policies.policy import ALL_DOMAINS

__all__ = ["AUDIT_PAGES"]

_READ = ("audit:read",)
_CONTENT = ("audit:read", "audit:content")
FILTERS = ("subject", "role", "tenant", "model", "decision", "event_type", "finding", "since", "until")
DECISIONS = tuple(str(d) for d in Decision)
EVENT_TYPES = tuple(str(e) for e in EventType)
_PAGE_SIZE = 50


def page_context(console: Console, session: ConsoleSession, **extra: Any) -> dict[str, Any]:
    return {
        "me": session.principal,
        "csrf": session.csrf_token,
        "can_content": console.can(session, "audit:content"),
        "can_admin": console.can(session, "admin:policy"),
        **extra,
    }


def _query(params: dict[str, str | None], cursor: str | None) -> AuditQuery:
    given = {k: v.strip() for k, v in params.items() if v is not None and v.strip()}
    try:
        return msgspec.convert({**given, "cursor": cursor or None, "limit": _PAGE_SIZE}, AuditQuery)
    except msgspec.ValidationError as exc:
        raise AuditQueryError(str(exc)) from exc


@get("/audit")
async def search_page(
    request: HTMXRequest,
    subject: FromQuery[str | None] = None,
    role: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
    model: FromQuery[str | None] = None,
    decision: FromQuery[str | None] = None,
    event_type: FromQuery[str | None] = None,
    finding: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
) -> Template:
    """Search with every filter the API has, 50 records a page; htmx swaps only the results."""
    console = Console.of(request)
    filters = {name: value for name, value in locals().items() if name in FILTERS}
    problem, page = "", None
    try:
        query = _query(filters, cursor)
        detail = "console search " + msgspec.json.encode(query).decode()
    except AuditQueryError as exc:
        query, problem, detail = None, str(exc), "console search (invalid filters)"
    session = await console.page(request, _READ, detail)
    if query is not None:
        query = await within_scope(console, request, session, query, detail)
        filters["tenant"] = query.tenant
        try:
            page = await console.services.audit_log.search(query)
        except AuditQueryError as exc:
            problem = str(exc)
    context = page_context(
        console,
        session,
        filters={k: v or "" for k, v in filters.items()},
        page=page,
        problem=problem,
        decisions=DECISIONS,
        event_types=EVENT_TYPES,
        first_query={k: v for k, v in filters.items() if v},
        next_query=_next_query(filters, page.next_cursor) if page and page.next_cursor else None,
    )
    status = 400 if problem else 200
    if _is_fragment(request):
        # The address bar shows the filters in use, not every empty field of the form.
        shown = _next_query(filters, cursor) if cursor else context["first_query"]
        url = "/console/audit" + (f"?{urlencode(shown)}" if shown else "")
        return HTMXTemplate(
            template_name="search_results.html", context=context, status_code=status, push_url=url
        )
    return Template(template_name="search.html", context=context, status_code=status)


async def within_scope(
    console: Console, request: HTMXRequest, session: ConsoleSession, query: AuditQuery, detail: str
) -> AuditQuery:
    """The query pinned to the officer's tenant when its audit:read reaches that tenant only;
    asking for another tenant is refused (and recorded), as the API refuses it."""
    scope = console.scope(session, *_READ)
    if scope.is_global:
        return query
    if query.tenant is not None and query.tenant != scope.domain:
        await console.refuse(request, session, f"audit:read not held in tenant {query.tenant!r}", detail)
        raise PageForbiddenError(text("your audit rights cover your own tenant's records only"))
    return msgspec.structs.replace(query, tenant=scope.domain)


async def _record_in_scope(
    console: Console, request: HTMXRequest, session: ConsoleSession, seq: int, permissions: tuple[str, ...]
) -> AuditRecord:
    """Record ``seq`` if the officer's scope covers its tenant; otherwise 'not found' as for an
    absent record, so other tenants' records cannot be probed (the refusal is recorded)."""
    try:
        record = await console.services.audit_log.get(seq)
    except AuditNotFoundError:
        raise PageNotFoundError(text("no audit record {seq}", seq=seq)) from None
    if not console.scope(session, *permissions).covers(record.event.tenant or ALL_DOMAINS):
        await console.refuse(
            request, session, f"record {seq} is outside the officer's tenant", f"record {seq}"
        )
        raise PageNotFoundError(text("no audit record {seq}", seq=seq))
    return record


def _is_fragment(request: HTMXRequest) -> bool:
    """An htmx swap wants the fragment; a history restore (back button) wants the whole page."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def _next_query(filters: dict[str, str | None], cursor: str) -> dict[str, str]:
    return {**{k: v for k, v in filters.items() if v}, "cursor": cursor}


@get("/audit/records/{seq:int}")
async def record_page(request: HTMXRequest, seq: FromPath[int]) -> Template:
    console = Console.of(request)
    session = await console.page(request, _READ, f"console record {seq}")
    record = await _record_in_scope(console, request, session, seq, _READ)
    event = msgspec.to_builtins(record.event)
    return Template(
        template_name="record.html",
        context=page_context(console, session, record=record, event=event),
    )


@get("/audit/records/{seq:int}/content")
async def content_fragment(request: HTMXRequest, seq: FromPath[int]) -> Template:
    """The decrypted prompt and completion; needs audit:content, and every view is recorded first."""
    console = Console.of(request)
    session = await console.page(request, _CONTENT, f"console content view {seq}")
    await _record_in_scope(console, request, session, seq, _CONTENT)
    problem, content = "", None
    try:
        content = await console.services.audit_log.read_content(seq)
    except AuditError as exc:
        problem = (
            str(exc)
            if isinstance(exc, AuditNotFoundError)
            else text("this record's content cannot be opened")
        )
    context = page_context(console, session, seq=seq, content=content, problem=problem)
    name = "content.html" if _is_fragment(request) else "content_page.html"
    return Template(template_name=name, context=context)


@get("/audit/verify")
async def verify_page(request: HTMXRequest) -> Template:
    console = Console.of(request)
    session = await console.page(request, _READ, "console verify page", every_tenant=True)
    audit_log = console.services.audit_log
    head = await audit_log.run_reader(audit_log.store.head)
    return Template(
        template_name="verify.html",
        context=page_context(console, session, head=head, report=None, key_id=audit_log.signer.key_id),
    )


@post("/audit/verify", status_code=200)
async def run_verify(request: HTMXRequest) -> Template:
    """Walk the whole chain against the trusted key and the witnesses (POST: it is costly)."""
    console = Console.of(request)
    session = await console.page(request, _READ, "console verify", every_tenant=True)
    audit_log = console.services.audit_log
    await audit_log.checkpoint()  # so the report and the newest checkpoint cover every record so far
    report = await audit_log.verify()
    head = await audit_log.run_reader(audit_log.store.head)
    context = page_context(console, session, head=head, report=report, key_id=audit_log.signer.key_id)
    return Template(
        template_name="verification.html" if _is_fragment(request) else "verify.html", context=context
    )


@get("/audit/export")
async def export_page(request: HTMXRequest) -> Template:
    console = Console.of(request)
    session = await console.page(request, _READ, "console export page", every_tenant=True)
    return Template(template_name="export.html", context=page_context(console, session, problem=""))


@get("/audit/export/download")
async def export_download(
    request: HTMXRequest,
    format: FromQuery[str] = "jsonl",
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    subject: FromQuery[str | None] = None,
) -> Response[Any]:
    """Records from ``since`` up to ``until`` as a sealed JSONL bundle (what ``strongroom audit verify
    --file`` checks offline) or as CSV with each row's chain hashes; with ``subject``, only that
    user's records (a selection bundle: ``audit.selection_bundle``)."""
    console = Console.of(request)
    fmt = format if format in ("jsonl", "csv") else ""
    user = (subject or "").strip()
    whose = f" user {user!r}" if user else ""
    detail = f"console export {fmt or format[:16]}{whose} {since or 'start'}..{until or 'end'}"
    session = await console.page(request, _READ, detail, every_tenant=True)
    try:
        if not fmt:
            raise AuditQueryError(text("format must be jsonl or csv"))
        with tempfile.TemporaryDirectory(prefix="strongroom-console-export-") as tmp:
            path = Path(tmp) / f"audit.{fmt}"
            if user:
                name = await _export_user(
                    console, path, fmt, Selection(subject=user, since=since or None, until=until or None)
                )
            else:
                first, last = await _seq_range(console, since or None, until or None)
                await console.services.audit_log.export(path, fmt=fmt, first_seq=first, last_seq=last)
                name = f"audit-{first}-{last}.{fmt}"
            body = await console.services.audit_log.run_reader(path.read_bytes)
    except AuditQueryError as exc:
        context = page_context(console, session, problem=str(exc))
        return Template(template_name="export.html", context=context, status_code=400)
    return Response(
        body,
        media_type="application/x-ndjson" if fmt == "jsonl" else "text/csv",
        headers={"content-disposition": f'attachment; filename="{name}"'},
    )


async def _export_user(console: Console, path: Path, fmt: str, selection: Selection) -> str:
    """One user's records into ``path``; the file name to offer (the user id stays out of it)."""
    audit_log = console.services.audit_log
    selection.query()  # a bad time is refused before anything is written
    if fmt == "csv":
        count = await audit_log.run_reader(lambda: write_csv(path, matching_rows(audit_log.store, selection)))
        name = f"audit-user-{count}-records.csv"
    else:
        now_us = int(time.time() * 1_000_000)
        seal = await audit_log.run_reader(
            lambda: export_selection(audit_log.store, audit_log.signer, path, selection, now_us=now_us)
        )
        count, name = seal.num_records, f"audit-user-{seal.first_seq}-{seal.last_seq}.jsonl"
    if count == 0:
        raise AuditQueryError(text("no records of that user in that time range"))
    return name


async def _seq_range(console: Console, since: str | None, until: str | None) -> tuple[int, int]:
    """The contiguous sequence range of records with since <= time < until (a bundle is a chain
    segment, so it cannot skip records in between)."""
    audit_log = console.services.audit_log
    first_page = await audit_log.search(AuditQuery(since=since, until=until, limit=1))
    if not first_page.records:
        raise AuditQueryError(text("no records in that time range"))
    first = first_page.records[0].seq
    last: int | None = None
    if until is not None:
        after = await audit_log.search(AuditQuery(since=until, limit=1))
        last = after.records[0].seq - 1 if after.records else None
    if last is None:
        last = (await audit_log.run_reader(audit_log.store.head)).seq
    return first, last


@get("/audit/public-key", media_type="application/x-pem-file")
async def public_key(request: HTMXRequest) -> Response[bytes]:
    console = Console.of(request)
    await console.page(request, _READ, "console public-key")
    return Response(
        console.services.audit_log.signer.public_key_pem(),
        media_type="application/x-pem-file",
        headers={"content-disposition": 'attachment; filename="audit-public-key.pem"'},
    )


AUDIT_PAGES = [
    search_page,
    record_page,
    content_fragment,
    verify_page,
    run_verify,
    export_page,
    export_download,
    public_key,
]
