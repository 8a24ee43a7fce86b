"""``/audit``: the compliance officer's API over the audit log.

Every route's guard declares what it needs: ``audit:read``, and ``audit:content`` too for reading
or matching content. Both reach as far as the caller holds them (``policies.control_scope``): a
reader scoped to a tenant sees that tenant's records only; export and verify span every tenant and
need the whole log. Authorization comes before any input is judged, so a caller without the right
gets 403 whatever it sends. Each search, export, verification and content view is itself recorded
(durably, before the answer leaves), and so is every refused attempt (by the ``Gatekeeper``).
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
from gateway.gatekeeper import Gatekeeper, requires
from gateway.permission import Connection, Permission, method_and_path
from policies.control_scope import ControlScope
from policies.policy import ALL_DOMAINS

__all__ = ["build_audit_router"]

_READ = ("audit:read",)
_CONTENT = ("audit:read", "audit:content")
_SEARCH_FILTERS = (
    "since",
    "until",
    "subject",
    "role",
    "tenant",
    "model",
    "decision",
    "event_type",
    "finding",
    "cursor",
    "limit",
)
_AGGREGATE_FILTERS = ("since", "until", "tenant")

# The app provides these app-wide under exactly these parameter names; the router adds the rest.
AuditLogDep = NamedDependency[AuditLog]
GatekeeperDep = NamedDependency[Gatekeeper]
ScopeDep = NamedDependency[ControlScope]


class MatchBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: str

    def __repr__(self) -> str:
        return f"MatchBody(text=<{len(self.text)} chars>)"


def _filters(connection: Connection, names: tuple[str, ...]) -> str:
    """The filters asked for, as the audit record spells them."""
    given = {name: connection.query_params.get(name) for name in names}
    return _json({k: v for k, v in given.items() if v is not None})


def _tenant_asked(connection: Connection) -> str | None:
    tenant = connection.query_params.get("tenant")
    return None if tenant is None else str(tenant)


def _every_tenant(_: Connection) -> str:
    return ALL_DOMAINS


def _reading(actions: tuple[str, ...], detail: Any, domain: Any = None) -> Permission:
    """An ``/audit`` permission: refused as "not allowed", recorded as ``METHOD /path``."""
    return Permission(
        actions=actions,
        refusal=lambda: AuditForbiddenError("not allowed"),
        domain=domain,
        endpoint=method_and_path,
        detail=detail,
    )


_SEARCH = _reading(_READ, lambda c: f"search {_filters(c, _SEARCH_FILTERS)}", _tenant_asked)
_RECORD = _reading(_READ, lambda c: f"record {c.path_params['seq']}")
_AGGREGATES = _reading(_READ, lambda c: f"aggregates {_filters(c, _AGGREGATE_FILTERS)}", _tenant_asked)
_EXPORT = _reading(
    _READ,
    lambda c: (
        f"export {c.query_params.get('format', 'jsonl')} "
        f"{c.query_params.get('first_seq') or 1}..{c.query_params.get('last_seq') or 'end'}"
    ),
    _every_tenant,
)
_VERIFY = _reading(_READ, lambda _: "verify", _every_tenant)
_PUBLIC_KEY = _reading(_READ, lambda _: "public-key")
_CONTENT_VIEW = _reading(_CONTENT, lambda c: f"content view {c.path_params['seq']}")
_CONTENT_MATCH = _reading(_CONTENT, lambda c: f"content match {c.path_params['seq']}")


async def _admit_record(
    request: Request[Any, Any, Any],
    gatekeeper: Gatekeeper,
    scope: ControlScope,
    audit_log: AuditLog,
    permission: Permission,
    seq: int,
) -> None:
    """The access is to one record, so its tenant is the domain: one a tenant-scoped caller may
    not read answers 403 whether or not it exists (no probing)."""
    if not scope.is_global:
        try:
            domain = (await audit_log.get(seq)).event.tenant
        except AuditNotFoundError:
            domain = ALL_DOMAINS
        await gatekeeper.require_domain(request, permission, scope, domain)
    await gatekeeper.record_access(request, permission)


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


@get("/records", guards=[requires(_SEARCH)])
async def search_records(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    control_scope: ScopeDep,
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
    given = locals()
    params = {name: given[name] for name in _SEARCH_FILTERS}
    await gatekeeper.record_access(request, _SEARCH)
    page = await audit_log.search(_query(params, control_scope))
    return msgspec.to_builtins(page)  # type: ignore[no-any-return]


@get("/records/{seq:int}", guards=[requires(_RECORD)])
async def get_record(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    control_scope: ScopeDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, Any]:
    await _admit_record(request, gatekeeper, control_scope, audit_log, _RECORD, seq)
    return msgspec.to_builtins(await audit_log.get(seq))  # type: ignore[no-any-return]


@get("/aggregates", guards=[requires(_AGGREGATES)])
async def aggregates(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    control_scope: ScopeDep,
    audit_log: AuditLogDep,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
) -> dict[str, Any]:
    """Usage per model and role, denials per day, filter hits per day (scoped like search)."""
    await gatekeeper.record_access(request, _AGGREGATES)
    params = {"since": since, "until": until, "tenant": tenant}
    return msgspec.to_builtins(await audit_log.aggregates(_query(params, control_scope)))  # type: ignore[no-any-return]


@get("/export", guards=[requires(_EXPORT)])
async def export(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    audit_log: AuditLogDep,
    format: FromQuery[str] = "jsonl",
    first_seq: FromQuery[str | None] = None,
    last_seq: FromQuery[str | None] = None,
) -> Response[bytes]:
    """A contiguous range as a sealed JSONL bundle (verifiable offline) or CSV with hashes.

    A range of the chain holds every tenant's records, so only a reader of the whole log (``*``)
    may export it."""
    await gatekeeper.record_access(request, _EXPORT)
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


@get("/verify", guards=[requires(_VERIFY)])
async def verify(
    request: Request[Any, Any, Any], gatekeeper: GatekeeperDep, audit_log: AuditLogDep
) -> dict[str, Any]:
    """Verify the whole chain: for readers of the whole log (``*``), like export."""
    await gatekeeper.record_access(request, _VERIFY)
    return msgspec.to_builtins(await audit_log.verify())  # type: ignore[no-any-return]


@get("/public-key", media_type="application/x-pem-file", guards=[requires(_PUBLIC_KEY)])
async def public_key(
    request: Request[Any, Any, Any], gatekeeper: GatekeeperDep, audit_log: AuditLogDep
) -> bytes:
    await gatekeeper.record_access(request, _PUBLIC_KEY)
    return audit_log.signer.public_key_pem()


@get("/records/{seq:int}/content", guards=[requires(_CONTENT_VIEW)])
async def view_content(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    control_scope: ScopeDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, str]:
    """Decrypted prompt and completion of one record (encrypt mode only)."""
    await _admit_record(request, gatekeeper, control_scope, audit_log, _CONTENT_VIEW, seq)
    content = await audit_log.read_content(seq)
    return {"prompt": content.prompt, "completion": content.completion}


@post("/records/{seq:int}/content/match", status_code=200, guards=[requires(_CONTENT_MATCH)])
async def match_content(
    request: Request[Any, Any, Any],
    gatekeeper: GatekeeperDep,
    control_scope: ScopeDep,
    audit_log: AuditLogDep,
    seq: FromPath[int],
) -> dict[str, bool]:
    """Investigator check (HMAC mode): was this text the record's prompt or completion?"""
    await _admit_record(request, gatekeeper, control_scope, audit_log, _CONTENT_MATCH, seq)
    # Parsed here, after authorization: a caller without the right learns nothing about its input.
    try:
        data = msgspec.json.decode(await request.body(), type=MatchBody)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise AuditQueryError(f"invalid request body: {type(exc).__name__}") from None
    return await audit_log.content_matches(seq, data.text)


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def build_audit_router() -> Router:
    """The ``/audit`` router; the app provides ``audit_log`` and installs a ``Gatekeeper``."""
    return Router(
        path="/audit",
        dependencies=Gatekeeper.dependencies(),
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
