"""The operator socket: a CLI's security operations reach the log the gateway owns, stamped with
the operator the kernel reports; nothing else travels that way; with no gateway they go direct."""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
from pathlib import Path

import msgspec
import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.event import AuditEvent, Decision, EventType
from audit.log import AuditLog
from audit.operator_channel import OperatorChannel, record_operations
from audit.testing import MemorySink

IDENTITY = f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}"


def _op(**fields: str) -> AuditEvent:
    return AuditEvent(event_type=EventType.KEY_OPERATION, decision=Decision.ALLOW, **fields)


def test_operations_reach_the_running_gateway_as_the_kernel_reports_the_operator(tmp_path: Path) -> None:
    # A deep data directory: the socket path is longer than sun_path's 108 bytes.
    data_dir = tmp_path / ("d" * 60) / ("e" * 60)
    cfg = AuditConfig()

    async def go() -> tuple[list[int], list[AuditEvent], int]:
        sink = MemorySink()
        channel = await OperatorChannel.start(sink, cfg.resolve(data_dir, cfg.operator_socket))
        assert channel is not None
        try:
            seqs = await record_operations(
                cfg, data_dir, [_op(detail="rotate"), _op(subject="bob", detail="seal")]
            )
            # A client claiming another operator: the gateway writes the one the kernel names.
            claimed = _op(subject="mallory@elsewhere", client_app="cli:mallory@elsewhere", detail="forged")
            assert await _send_raw(channel.path, [claimed]) == b'{"seqs":[3]}\n'
            with pytest.raises(AuditUnavailableError, match="only key operations and admin changes"):
                forged = AuditEvent(event_type=EventType.INFERENCE, decision=Decision.ALLOW, subject="x")
                await record_operations(cfg, data_dir, [forged])
            mode = channel.path.stat().st_mode & 0o777
        finally:
            await channel.stop()
        return seqs, sink.events, mode

    seqs, events, mode = asyncio.run(go())
    assert seqs == [1, 2] and mode == 0o600
    assert [(e.subject, e.client_app, e.detail) for e in events] == [
        (IDENTITY, f"cli:{IDENTITY}", "rotate"),
        ("bob", f"cli:{IDENTITY}", "seal"),  # an explicit actor stays; the OS identity is added
        ("mallory@elsewhere", f"cli:{IDENTITY}", "forged"),
    ]
    assert not (data_dir / cfg.operator_socket).exists()


async def _send_raw(path: Path, events: list[AuditEvent]) -> bytes:
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        reader, writer = await asyncio.open_unix_connection(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)
    writer.write(msgspec.json.encode({"events": events}) + b"\n")
    reply = await reader.readline()
    writer.close()
    return reply


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
