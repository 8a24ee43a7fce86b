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

    def audit_event(self, *, error: str = "") -> AuditEvent:
        """This operation's KEY_OPERATION record (``error``: why it failed); the one place one is built."""
        return AuditEvent(
            event_type=EventType.KEY_OPERATION,
            decision=Decision.ERROR if error else Decision.ALLOW,
            model=self.model,
            engine_instance=self.process,
            reason=error,
            detail=msgspec.json.encode(self, order="sorted").decode(),
        )

    @classmethod
    def of(cls, event: AuditEvent) -> KeyOperation:
        """The operation a KEY_OPERATION record describes (its ``detail``)."""
        return msgspec.json.decode(event.detail, type=cls)


def key_event(
    operation: str, ref: KeyRef, *, model: str, process: str, provider: str, error: str = ""
) -> AuditEvent:
    return KeyOperation(
        operation=operation,
        key_id=ref.key_id,
        key_version=ref.version,
        model=model,
        process=process,
        provider=provider,
    ).audit_event(error=error)


async def record_all(audit: AuditSink | None, events: list[AuditEvent]) -> None:
    """Append each event; raises AuditRequiredError if the sink cannot make one durable."""
    if audit is None:
        return
    for event in events:
        try:
            await audit.append(event)
        except AuditUnavailableError as exc:
            raise AuditRequiredError(f"key operation not audited, refused: {exc}") from None
