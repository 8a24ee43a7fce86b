"""Audit records for key operations: key id, version, model, process; never key material.

``KeyOperation.audit_event`` is the one place such a record is built: for the CLI and rotation
here, and for an engine's model unseals, which reach the gateway as the engine protocol's
``KeyOperationEvent`` (``strongroom.engine_process.KeyOperationLog``, ``gateway.engine_pool``).
"""

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
        if event.event_type != EventType.KEY_OPERATION:
            raise ValueError(f"a {event.event_type} event describes no key operation")
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
