"""``/audit``: the compliance officer's API over the audit log.

Every handler needs ``audit:read``; reading or matching content needs ``audit:content``. Both
reach as far as the caller holds them (``policies.control_scope``): a reader scoped to a tenant
sees that tenant's records only; export and verify span every tenant and need the whole log.
Authorization comes before any input is judged, so a caller without the right gets 403 whatever
it sends. Each search, export, verification and content view is itself recorded (durably, before
the answer leaves), and so is every refused attempt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery

from audit.errors import AuditForbiddenError, AuditNotFoundError, AuditQueryError
from audit.log import AuditLog
from audit.query import AuditQuery
from common.audit_event import AuditEvent, Decision, EventType
from common.principal import Principal
from gateway.auditor import RequestSink
from gateway.request_context import request_context
from policies.authorizer import Authorizer
from policies.control_scope import ControlScope
from policies.policy import ALL_DOMAINS

__all__ = ["build_audit_router"]

CONTROL_PLANE = "*"
_CONTENT = ("audit:read", "audit:content")

# The app provides these app-wide under exactly these parameter names.
PrincipalDep = NamedDependency[Principal]
AuthorizerDep = NamedDependency[Authorizer]
AuditLogDep = NamedDependency[AuditLog]


class MatchBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: str

    def __repr__(self) -> str:
        return f"MatchBody(text=<{len(self.text)} chars>)"


async def _authorize(
    request: Request[Any, Any, Any],
    principal: Principal,
    authorizer: Authorizer,
    audit_log: AuditLog,
    actions: tuple[str, ...],
    detail: str,
    *,
    domain: str | None = None,
    record: int | None = None,
) -> ControlScope:
    """Check every action where the access reaches, then record the access (or the refusal)
    before anything is answered; nothing about the request is judged before this.

    ``domain`` is the tenant the access concerns, ``*`` for the whole log (export, verify), or
    None for "wherever the caller holds the actions" (the returned scope then narrows it).
    ``record``: the access is to that one record, so its tenant is the domain; one a
    tenant-scoped caller may not read answers 403 whether or not it exists (no probing).
    """
    scope = authorizer.control_scope(principal, *actions)
    if record is not None and not scope.is_empty and not scope.is_global:
        try:
            domain = (await audit_log.get(record)).event.tenant
        except AuditNotFoundError:
            domain = ALL_DOMAINS
    if scope.is_empty:
        missing = [a for a in actions if not authorizer.allowed(principal, a, CONTROL_PLANE)]
        reason = "missing " + ",".join(missing)
    elif domain is not None and not scope.covers(domain):
        reason = f"{','.join(actions)} not held in domain {domain!r}"
    else:
        reason = ""
    allowed = not reason
    # Through the request's sink: the record carries the server's request id, not a client header,
    # and an allowed access is written as the answer starts, with the status the caller gets.
    sink = RequestSink(audit_log, request_context(request.scope))  # type: ignore[arg-type]
    await (sink.append if not allowed else sink.append_on_answer)(
        AuditEvent(
            event_type=EventType.AUDIT_ACCESS if allowed else EventType.AUTHORIZATION_DENIAL,
            decision=Decision.ALLOW if allowed else Decision.DENY,
            subject=principal.subject,
            roles=principal.roles,
            tenant=principal.tenant or "",
            client_ip=request.client.host if request.client else "",
            client_app=principal.client_id or "",
            endpoint=f"{request.method} {request.url.path}",
            reason=reason,
            status=200 if allowed else 403,
            detail=detail,
        )
    )
    if not allowed:
        raise AuditForbiddenError("not allowed")
    return scope


def _query(params: dict[str, Any], scope: ControlScope) -> AuditQuery:
    """The filters, checked after authorization; a tenant-scoped caller's are pinned to its tenant."""
    given = {k: v for k, v in params.items() if v is not None}
    if not scope.is_global:
        given["tenant"] = scope.domain
    try:
        return msgspec.convert(given, AuditQuery, strict=False)
    except msgspec.ValidationError as exc:
        raise AuditQueryError(str(exc)) from exc


def _seq(value: str | None, name: str) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        raise AuditQueryError(f"{name} must be an integer") from None


@get("/records")
async def search_records(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    subject: FromQuery[str | None] = None,
    role: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
    model: FromQuery[str | None] = None,
    decision: FromQuery[str | None] = None,
    event_type: FromQuery[str | None] = None,
    finding: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
    limit: FromQuery[str | None] = None,
) -> dict[str, Any]:
    """Filtered records, oldest first; follow ``next_cursor`` for more. Without ``tenant``, a
    tenant-scoped reader gets its own tenant's records; another tenant is 403, not an empty page
    (an investigator must not mistake "not yours" for "nothing happened")."""
    params = dict(locals())
    for name in ("request", "principal", "authorizer", "audit_log"):
        params.pop(name)
    detail = f"search {_json({k: v for k, v in params.items() if v is not None})}"
    scope = await _authorize(
        request, principal, authorizer, audit_log, ("audit:read",), detail, domain=tenant
    )
    page = await audit_log.search(_query(params, scope))
    return msgspec.to_builtins(page)  # type: ignore[no-any-return]


@get("/records/{seq:int}")
async def get_record(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, Any]:
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), f"record {seq}", record=seq)
    return msgspec.to_builtins(await audit_log.get(seq))  # type: ignore[no-any-return]


@get("/aggregates")
async def aggregates(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
) -> dict[str, Any]:
    """Usage per model and role, denials per day, filter hits per day (scoped like search)."""
    params = {"since": since, "until": until, "tenant": tenant}
    detail = f"aggregates {_json({k: v for k, v in params.items() if v is not None})}"
    scope = await _authorize(
        request, principal, authorizer, audit_log, ("audit:read",), detail, domain=tenant
    )
    return msgspec.to_builtins(await audit_log.aggregates(_query(params, scope)))  # type: ignore[no-any-return]


@get("/export")
async def export(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    format: FromQuery[str] = "jsonl",
    first_seq: FromQuery[str | None] = None,
    last_seq: FromQuery[str | None] = None,
) -> Response[bytes]:
    """A contiguous range as a sealed JSONL bundle (verifiable offline) or CSV with hashes.

    A range of the chain holds every tenant's records, so only a reader of the whole log (``*``)
    may export it."""
    await _authorize(
        request,
        principal,
        authorizer,
        audit_log,
        ("audit:read",),
        f"export {format} {first_seq or 1}..{last_seq or 'end'}",
        domain=ALL_DOMAINS,
    )
    fmt, first, last = format, _seq(first_seq, "first_seq") or 1, _seq(last_seq, "last_seq")
    if fmt not in ("jsonl", "csv"):
        raise AuditQueryError("format must be jsonl or csv")
    with tempfile.TemporaryDirectory(prefix="strongroom-export-") as tmp:
        path = Path(tmp) / f"audit.{fmt}"
        await audit_log.export(path, fmt=fmt, first_seq=first, last_seq=last)
        body = await audit_log.run_reader(path.read_bytes)
    media = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
    return Response(
        body,
        media_type=media,
        headers={"content-disposition": f'attachment; filename="audit-{first}.{fmt}"'},
    )


@get("/verify")
async def verify(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
) -> dict[str, Any]:
    """Verify the whole chain: for readers of the whole log (``*``), like export."""
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), "verify", domain=ALL_DOMAINS)
    return msgspec.to_builtins(await audit_log.verify())  # type: ignore[no-any-return]


@get("/public-key", media_type="application/x-pem-file")
async def public_key(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
) -> bytes:
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), "public-key")
    return audit_log.signer.public_key_pem()


@get("/records/{seq:int}/content")
async def view_content(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, str]:
    """Decrypted prompt and completion of one record (encrypt mode only)."""
    await _authorize(request, principal, authorizer, audit_log, _CONTENT, f"content view {seq}", record=seq)
    content = await audit_log.read_content(seq)
    return {"prompt": content.prompt, "completion": content.completion}


@post("/records/{seq:int}/content/match", status_code=200)
async def match_content(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, bool]:
    """Investigator check (HMAC mode): was this text the record's prompt or completion?"""
    await _authorize(request, principal, authorizer, audit_log, _CONTENT, f"content match {seq}", record=seq)
    # Parsed here, after authorization: a caller without the right learns nothing about its input.
    try:
        data = msgspec.json.decode(await request.body(), type=MatchBody)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise AuditQueryError(f"invalid request body: {type(exc).__name__}") from None
    return await audit_log.content_matches(seq, data.text)


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def build_audit_router() -> Router:
    """The ``/audit`` router; the app provides ``principal``, ``authorizer`` and ``audit_log``."""
    return Router(
        path="/audit",
        route_handlers=[
            search_records,
            get_record,
            aggregates,
            export,
            verify,
            public_key,
            view_content,
            match_content,
        ],
    )
