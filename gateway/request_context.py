"""What the gateway knows about one request while it handles it. Holds no prompt text."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from common.audit_event import AuditEvent
from common.principal import Principal

__all__ = ["RequestContext", "new_request_id", "request_context"]


def new_request_id() -> str:
    return f"req_{secrets.token_hex(16)}"


@dataclass
class RequestContext:
    """Mutable per-request state, filled in as the pipeline advances."""

    request_id: str
    endpoint: str
    client_ip: str = ""
    trace_id: str = ""
    started: float = field(default_factory=time.perf_counter)
    principal: Principal | None = None
    model: str = ""
    engine_instance: str = ""
    end_user: str = ""
    """The body's OpenAI ``user`` field, once parsed."""
    num_records: int = 0
    """Audit records written for this request; RequestMiddleware writes one when none was."""
    error_reason: str = ""
    """What the audit record says of the error answered (no client values; see errors.py)."""
    is_audit_down: bool = False
    """The answer is the audit-unavailable 503: no further record is attempted."""
    has_middleware: bool = False
    """RequestMiddleware serves this request: it can write a record as the answer starts."""
    on_answer: AuditEvent | None = None
    """The request's record, to be written as the answer starts with the status it carries."""

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


def request_context(scope: dict[str, Any], endpoint: str | None = None) -> RequestContext:
    """The request's one context (made by RequestMiddleware), labelled with ``endpoint`` if given.

    Every handler and dependency of a request shares it, so whatever one of them learns (the
    principal, the model) and whether a record was written is known where the answer leaves.
    """
    state = scope.setdefault("state", {})
    ctx: RequestContext | None = state.get("ctx")
    if ctx is None:  # an app mounted without RequestMiddleware (unit tests)
        client = scope.get("client")
        ctx = state["ctx"] = RequestContext(
            request_id=state.get("request_id", ""),
            trace_id=state.get("trace_id", ""),
            endpoint=endpoint or scope.get("path", ""),
            client_ip=client[0] if client else "",
        )
    if endpoint is not None:
        ctx.endpoint = endpoint
    return ctx
