"""Security operations run from a shell, recorded with the operator who ran them.

Key operations, policy changes and revocations made by ``strongroom`` commands are audited like
the API's, with the operator's identity: OS user and host (``user@host``) as the subject unless
the event names its own actor (a policy change's ``--actor``), and always as the client app
(``cli:user@host``). The records go through ``OperatorLog``: to the running gateway that owns the
log (its writer socket serves only the gateway's own OS user), or into the log itself when no
gateway runs; either way they are durable before the command reports success.
"""

from __future__ import annotations

import getpass
import os
import pwd
import socket
from collections.abc import Sequence
from pathlib import Path

import msgspec

from audit.config import AuditConfig
from common.audit_event import AuditEvent

__all__ = ["OperatorSink", "local_identity", "operator_event", "record_operations"]


def local_identity() -> str:
    """``user@host`` of the process: the OS user by uid (not $USER, which the caller sets)."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = getpass.getuser()
    return f"{user}@{socket.gethostname()}"


def operator_event(event: AuditEvent, identity: str) -> AuditEvent:
    """``event`` as done by ``identity`` from the CLI."""
    return msgspec.structs.replace(event, subject=event.subject or identity, client_app=f"cli:{identity}")


async def record_operations(cfg: AuditConfig, data_dir: Path, events: Sequence[AuditEvent]) -> list[int]:
    """Record a CLI's security operations; returns their sequence numbers once durable.

    Raises ``AuditUnavailableError`` (or ``AuditWriterBusyError``) when they cannot be recorded.
    """
    from audit.operator_log import OperatorLog

    identity = local_identity()
    log = OperatorLog(cfg, data_dir)
    try:
        return [await log.append(operator_event(event, identity)) for event in events]
    finally:
        await log.close()


class OperatorSink:
    """An ``AuditSink`` for CLI commands: each append is one ``record_operations`` call.

    Works from any event loop (the key functions run their own ``asyncio.run`` per batch).
    """

    def __init__(self, cfg: AuditConfig, data_dir: Path) -> None:
        self._cfg = cfg
        self._data_dir = data_dir

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        [seq] = await record_operations(self._cfg, self._data_dir, [event])
        return seq
