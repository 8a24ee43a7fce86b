"""Audit records for key operations: key id, version, model, process; never key material."""

from __future__ import annotations

import msgspec

from common.audit_event import AuditEvent, Decision, EventType
from common.audit_sink import AuditSink, AuditUnavailableError
from keys.errors import AuditRequiredError
from keys.provider import KeyRef


class KeyOperation(msgspec.Struct, frozen=True, kw_only=True):
    """One audited key operation, as it lands in ``AuditEvent.detail`` (canonical JSON)."""

    operation: str
    """"init", "seal", "unwrap", "rewrap", "rotate", "retire", "export"; the seal registry's
    "register", "pin", "unpin", "unregister"."""
    key_id: str
    key_version: int
    model: str
    process: str
    provider: str


def key_event(
    operation: str, ref: KeyRef, *, model: str, process: str, provider: str, error: str = ""
) -> AuditEvent:
    detail = KeyOperation(
        operation=operation,
        key_id=ref.key_id,
        key_version=ref.version,
        model=model,
        process=process,
        provider=provider,
    )
    return AuditEvent(
        event_type=EventType.KEY_OPERATION,
        decision=Decision.ERROR if error else Decision.ALLOW,
        model=model,
        engine_instance=process,
        reason=error,
        detail=msgspec.json.encode(detail, order="sorted").decode(),
    )


async def record_all(audit: AuditSink | None, events: list[AuditEvent]) -> None:
    """Append each event; raises AuditRequiredError if the sink cannot make one durable."""
    if audit is None:
        return
    for event in events:
        try:
            await audit.append(event)
        except AuditUnavailableError as exc:
            raise AuditRequiredError(f"key operation not audited, refused: {exc}") from None
