"""Caps on what one audit event may hold: callers choose many of its strings.

A record is evidence, not a mirror of the request. Model names, subjects, roles, user ids and
the reasons that quote them come from clients and their tokens; uncapped, one request could
store 100 KB twice. Every text field has a cap; a longer value is cut and the cut says how long
the value was (``abc…[+99997 chars]``), so truncation is visible. Control characters are written
as ``\\xNN`` text so a value cannot break the line structure of ``audit tail`` or a CSV export.
"""

from __future__ import annotations

import re

import msgspec

from common.audit_event import AuditEvent

__all__ = ["MAX_ROLES", "bounded_event", "bounded_text"]

MAX_ROLES = 32
"""Roles kept per record; a token with more is cut (and the cut noted on the last one kept)."""

_CAPS: dict[str, int] = {
    "request_id": 64,
    "trace_id": 64,
    "subject": 256,
    "tenant": 128,
    "client_ip": 64,
    "client_app": 256,
    "model": 256,
    "model_manifest": 128,
    "endpoint": 256,
    "reason": 512,
    "engine_instance": 256,
    "end_user": 256,
    "detail": 4096,
    "before": 65_536,
    "after": 65_536,
}
_ROLE_CAP = 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def bounded_text(text: str, cap: int) -> str:
    """``text`` with control characters escaped, cut to ``cap`` characters (plus the note)."""
    if len(text) <= cap and text.isascii() and text.isprintable():
        return text  # the common case, without the regex
    if _CONTROL.search(text):
        text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if len(text) <= cap:
        return text
    return f"{text[:cap]}…[+{len(text) - cap} chars]"


def bounded_event(event: AuditEvent) -> AuditEvent:
    """The event with every client-reachable string within its cap (the same object when it is)."""
    changes: dict[str, object] = {}
    for name, cap in _CAPS.items():
        value = getattr(event, name)
        if value:
            capped = bounded_text(value, cap)
            if capped is not value:
                changes[name] = capped
    roles = tuple(bounded_text(role, _ROLE_CAP) for role in event.roles[:MAX_ROLES])
    if len(event.roles) > MAX_ROLES:
        roles = (*roles[:-1], f"{roles[-1]}…[+{len(event.roles) - MAX_ROLES} roles]")
    if roles != event.roles:
        changes["roles"] = roles
    return msgspec.structs.replace(event, **changes) if changes else event
