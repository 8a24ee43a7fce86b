"""Compliance queries: filters, opaque cursors, and the WHERE clause both stores share."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from audit.errors import AuditQueryError
from audit.record import AuditRecord, iso_to_us, tag_value

MAX_LIMIT = 1000


class AuditQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Every filter is optional; all given filters must hold. Times are RFC 3339, ``until`` exclusive."""

    since: str | None = None
    until: str | None = None
    subject: str | None = None
    role: str | None = None
    tenant: str | None = None
    model: str | None = None
    decision: str | None = None
    event_type: str | None = None
    finding: str | None = None
    """A filter finding type, e.g. ``pii.cn_resident_id``."""
    cursor: str | None = None
    limit: int = 100

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise AuditQueryError(f"limit must be within 1..{MAX_LIMIT}")
        for moment in (self.since, self.until):
            if moment is not None:
                _time_us(moment)  # a bad time is refused with the query, before any log is opened


class AuditPage(msgspec.Struct, frozen=True, kw_only=True):
    records: list[AuditRecord]
    next_cursor: str | None
    """Pass back as ``cursor`` for the next page; None on the last page."""


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = text.partition(":")
        seq = int(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AuditQueryError("invalid cursor") from exc
    if kind != "seq" or seq < 0:
        raise AuditQueryError("invalid cursor")
    return seq


def _time_us(text: str) -> int:
    try:
        return iso_to_us(text)
    except ValueError as exc:
        raise AuditQueryError(f"invalid time {text!r}; use RFC 3339") from exc


def where_clause(query: AuditQuery, after_seq: int, mark: str) -> tuple[str, list[Any]]:
    """SQL condition and parameters; ``mark`` is the driver's placeholder (``?`` or ``%s``)."""
    parts = [f"seq > {mark}"]
    params: list[Any] = [after_seq]
    if query.since is not None:
        parts.append(f"time_us >= {mark}")
        params.append(_time_us(query.since))
    if query.until is not None:
        parts.append(f"time_us < {mark}")
        params.append(_time_us(query.until))
    for column in ("subject", "tenant", "model", "decision", "event_type"):
        value = getattr(query, column)
        if value is not None:
            parts.append(f"{column} = {mark}")
            params.append(value)
    for column, value in (("roles", query.role), ("findings", query.finding)):
        if value is not None:
            # LIKE wildcards in the value are escaped so 'a_b' cannot match 'axb'.
            escaped = tag_value(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            parts.append(f"{column} LIKE {mark} ESCAPE '\\'")
            params.append(f"%|{escaped}|%")
    return " AND ".join(parts), params
