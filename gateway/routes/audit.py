"""``/audit``: the compliance officer's API over the audit log.

Every handler needs ``audit:read`` on the control plane; reading or matching content needs
``audit:content``. Each search, export, verification and content view is itself recorded
(durably, before the answer leaves), and so is every refused attempt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from audit.errors import AuditForbiddenError, AuditQueryError
from audit.event import AuditEvent, Decision, EventType
from audit.log import AuditLog
from audit.query import AuditQuery
from gateway.auditor import RequestSink
from gateway.auth.principal import Principal
from gateway.request_context import request_context
from policies.authorizer import Authorizer

__all__ = ["build_audit_router"]

CONTROL_PLANE = "*"

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
) -> None:
    """Check every action, then record the access (or the refusal) before anything is answered."""
    missing = [a for a in actions if not authorizer.allowed(principal, a, CONTROL_PLANE)]
    allowed = not missing
    # Through the request's sink: the record carries the server's request id, not a client header.
    sink = RequestSink(audit_log, request_context(request.scope))  # type: ignore[arg-type]
    await sink.append(
        AuditEvent(
            event_type=EventType.AUDIT_ACCESS if allowed else EventType.AUTHORIZATION_DENIAL,
            decision=Decision.ALLOW if allowed else Decision.DENY,
            subject=principal.subject,
            roles=principal.roles,
            tenant=principal.tenant or "",
            client_ip=request.client.host if request.client else "",
            client_app=principal.client_id or "",
            endpoint=f"{request.method} {request.url.path}",
            reason="" if allowed else "missing " + ",".join(missing),
            status=200 if allowed else 403,
            detail=detail,
        )
    )
    if not allowed:
        raise AuditForbiddenError("not allowed")


def _query(params: dict[str, Any]) -> AuditQuery:
    try:
        return msgspec.convert({k: v for k, v in params.items() if v is not None}, AuditQuery)
    except msgspec.ValidationError as exc:
        raise AuditQueryError(str(exc)) from exc


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
    limit: FromQuery[int] = 100,
) -> dict[str, Any]:
    """Filtered records, oldest first; follow ``next_cursor`` for more."""
    params = dict(locals())
    for name in ("request", "principal", "authorizer", "audit_log"):
        params.pop(name)
    query = _query(params)
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), f"search {_json(query)}")
    page = await audit_log.search(query)
    return msgspec.to_builtins(page)  # type: ignore[no-any-return]


@get("/records/{seq:int}")
async def get_record(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, Any]:
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), f"record {seq}")
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
    """Usage per model and role, denials per day, filter hits per day."""
    query = _query({"since": since, "until": until, "tenant": tenant})
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), f"aggregates {_json(query)}")
    return msgspec.to_builtins(await audit_log.aggregates(query))  # type: ignore[no-any-return]


@get("/export")
async def export(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    format: FromQuery[str] = "jsonl",
    first_seq: FromQuery[int] = 1,
    last_seq: FromQuery[int | None] = None,
) -> Response[bytes]:
    """A contiguous range as a sealed JSONL bundle (verifiable offline) or CSV with hashes."""
    fmt = format
    if fmt not in ("jsonl", "csv"):
        raise AuditQueryError("format must be jsonl or csv")
    await _authorize(
        request,
        principal,
        authorizer,
        audit_log,
        ("audit:read",),
        f"export {fmt} {first_seq}..{last_seq or 'end'}",
    )
    with tempfile.TemporaryDirectory(prefix="strongroom-export-") as tmp:
        path = Path(tmp) / f"audit.{fmt}"
        await audit_log.export(path, fmt=fmt, first_seq=first_seq, last_seq=last_seq)
        body = await audit_log.run_reader(path.read_bytes)
    media = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
    return Response(
        body,
        media_type=media,
        headers={"content-disposition": f'attachment; filename="audit-{first_seq}.{fmt}"'},
    )


@get("/verify")
async def verify(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
) -> dict[str, Any]:
    await _authorize(request, principal, authorizer, audit_log, ("audit:read",), "verify")
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
    await _authorize(
        request, principal, authorizer, audit_log, ("audit:read", "audit:content"), f"content view {seq}"
    )
    content = await audit_log.read_content(seq)
    return {"prompt": content.prompt, "completion": content.completion}


@post("/records/{seq:int}/content/match", status_code=200)
async def match_content(
    request: Request[Any, Any, Any],
    principal: PrincipalDep,
    authorizer: AuthorizerDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
    data: JSONBody[MatchBody],
) -> dict[str, bool]:
    """Investigator check (HMAC mode): was this text the record's prompt or completion?"""
    await _authorize(
        request, principal, authorizer, audit_log, ("audit:read", "audit:content"), f"content match {seq}"
    )
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
