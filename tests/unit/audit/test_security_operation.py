"""A CLI's security operations are recorded with the operator the OS names: through the gateway
that owns the log when one runs (its writer socket), straight into the log when none does."""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
from pathlib import Path

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.security_operation import record_operations
from audit.writer_socket import WriterSocket
from common.audit_event import AuditEvent, Decision, EventType

IDENTITY = f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}"


def _op(**fields: str) -> AuditEvent:
    return AuditEvent(event_type=EventType.KEY_OPERATION, decision=Decision.ALLOW, **fields)


def test_beside_a_running_gateway_operations_go_through_its_writer(tmp_path: Path) -> None:
    cfg = AuditConfig()

    async def go() -> list[AuditEvent]:
        log = await AuditLog.open(cfg, tmp_path)
        writer = await WriterSocket.start(log, cfg.resolve(tmp_path, cfg.sqlite_path), tmp_path)
        try:
            ops = [_op(detail="rotate"), _op(subject="bob", detail="seal")]
            seqs = await record_operations(cfg, tmp_path, ops)
            return [(await log.get(seq)).event for seq in seqs]
        finally:
            await writer.close()
            await log.close()

    events = asyncio.run(go())
    assert [(e.subject, e.client_app, e.detail) for e in events] == [
        (IDENTITY, f"cli:{IDENTITY}", "rotate"),
        ("bob", f"cli:{IDENTITY}", "seal"),  # an explicit actor stays; the OS identity is added
    ]


def test_without_a_gateway_operations_are_written_to_the_log_directly(tmp_path: Path) -> None:
    cfg = AuditConfig()

    async def go() -> AuditEvent:
        [seq] = await record_operations(cfg, tmp_path, [_op(detail="export")])
        log = await AuditLog.open(cfg, tmp_path, heartbeat=False, record_lifecycle=False)
        try:
            return (await log.get(seq)).event
        finally:
            await log.close()

    event = asyncio.run(go())
    assert (event.subject, event.client_app, event.detail) == (IDENTITY, f"cli:{IDENTITY}", "export")
