"""Master key rotation from the console: ``keys.rotation.rotate``, the code path of ``strongroom
keys rotate`` (same default models, the seal registry rewrapped and re-signed, old versions
retired only when nothing registered still needs them), run for one administrator.

The administrator must type the current key version (``master/v3``): a stale page, a second
click or another replica's rotation in between makes the typed version wrong, and nothing
happens. ``rotate`` is blocking and records its key operations with its own ``asyncio.run``; it
runs on a worker thread, and ``OfficerSink`` carries each record back to the gateway's audit
log on the gateway's loop, with the administrator as subject (fail closed: a record that cannot
be made durable stops the rotation's report with ``AuditRequiredError``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from common.audit_event import AuditEvent
from gateway.console.errors import RotationNotConfirmedError
from gateway.console.language import text
from keys.config import KeysConfig
from keys.factory import build_provider, seal_registry
from keys.provider import KeyStatus
from keys.report import RotationReport
from keys.rotation import default_model_dirs, rotate

if TYPE_CHECKING:
    from audit.log import AuditLog
    from common.principal import Principal

__all__ = ["OfficerSink", "rotate_master_key"]


class OfficerSink:
    """An ``AuditSink`` usable from a worker thread's own event loop: each event is appended by the
    gateway's audit log on ``loop``, as done by ``principal`` through the console."""

    def __init__(self, audit_log: AuditLog, principal: Principal, loop: asyncio.AbstractEventLoop) -> None:
        self._log = audit_log
        self._principal = principal
        self._loop = loop

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        who = self._principal
        event = msgspec.structs.replace(
            event, subject=who.subject, roles=who.roles, tenant=who.tenant or "", client_app="console"
        )
        done = asyncio.run_coroutine_threadsafe(self._log.append(event, served=served), self._loop)
        return await asyncio.wrap_future(done)


def rotate_master_key(
    config: KeysConfig, data_path: Path, typed_version: str, sink: OfficerSink
) -> RotationReport:
    """Blocking: rotate when ``typed_version`` names the current version. Raises ``KeysError``
    (``RotationNotConfirmedError`` when the confirmation does not match)."""
    provider = build_provider(config, data_path)
    try:
        current = next((v.ref for v in provider.versions() if v.status is KeyStatus.CURRENT), None)
        if current is None:
            raise RotationNotConfirmedError(text("the key provider has no current version"))
        if typed_version.strip() != str(current):
            raise RotationNotConfirmedError(
                text("type {version} to confirm; nothing was rotated", version=current)
            )
        return rotate(
            provider,
            default_model_dirs(data_path),
            audit=sink,
            process=f"console-rotate:{os.getpid()}",
            registry=seal_registry(config, data_path, provider),
        )
    finally:
        close = getattr(provider, "close", None)  # a PKCS#11 session; a key file holds none
        if close is not None:
            close()
