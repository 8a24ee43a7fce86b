"""One audit event: what happened, to whom, and what was decided.

Field choice follows PCI DSS v4 10.2.2 (user, event type, time, success or failure,
origin, affected resource) and MLPS 2.0 level 3. Raw prompt or completion text is never
a field here; content handling is a separate, policy-driven concern.
"""

from __future__ import annotations

import enum

import msgspec

from common.finding import Finding


class EventType(enum.StrEnum):
    INFERENCE = "inference"
    AUTHENTICATION_FAILURE = "authentication_failure"
    AUTHORIZATION_DENIAL = "authorization_denial"
    RATE_LIMIT = "rate_limit"
    FILTER_ACTION = "filter_action"
    REQUEST_REJECTED = "request_rejected"
    ADMIN_CHANGE = "admin_change"
    KEY_OPERATION = "key_operation"
    AUDIT_ACCESS = "audit_access"
    SERVICE_START = "service_start"
    SERVICE_STOP = "service_stop"
    AUDIT_OUTAGE = "audit_outage"
    """Written by the log itself once the store is back after refusing appends."""
    REQUEST = "request"
    """A request no component recorded itself (a framework refusal, a metadata read): who asked
    what, and the status answered. Keeps "one record per request" whatever answered it."""
    AUDIT_RECOVERY = "audit_recovery"
    """Written by the log itself when it opens after its previous writer stopped uncleanly."""


class Decision(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ERROR = "error"


class AuditEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the application hands to the audit log. Time and sequence are added by the log."""

    event_type: EventType
    decision: Decision
    request_id: str = ""
    trace_id: str = ""
    subject: str = ""
    roles: tuple[str, ...] = ()
    tenant: str = ""
    client_ip: str = ""
    client_app: str = ""
    model: str = ""
    model_manifest: str = ""
    endpoint: str = ""
    reason: str = ""
    status: int = 0
    findings: tuple[Finding, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    engine_instance: str = ""
    before: str = ""
    """Admin changes: the state before, as canonical JSON."""
    after: str = ""
    """Admin changes: the state after, as canonical JSON."""
    detail: str = ""
    """Free-form, content-free detail (e.g. key id for key operations)."""
    end_user: str = ""
    """The OpenAI ``user`` field: the calling application's own id for its end user."""
