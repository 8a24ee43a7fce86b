"""The key officer's pages: sealed models in the seal registry, the master key's versions, and
rotation behind a typed confirmation (``key_rotation``). Needs ``admin:keys`` in every tenant
(keys and models serve all of them).

The gateway holds no key provider (the engines do), so the page opens the configured one for the
view and closes it after; when it cannot be opened (HSM down, passphrase not set, no key file)
the page says so instead. Public facts only: ids, versions, digests, paths, public keys.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litestar import get, post
from litestar.response import Template
from litestar_htmx import HTMXRequest

from gateway.console.console import Console
from gateway.console.errors import RotationNotConfirmedError
from gateway.console.key_rotation import OfficerSink, rotate_master_key
from gateway.console.language import text
from gateway.console.session_store import ConsoleSession
from keys.config import KeysConfig
from keys.errors import KeysError
from keys.factory import build_provider, seal_registry
from keys.provider import KeyVersionInfo
from keys.seal_registry import Sealing

__all__ = ["KEY_PAGES", "KeyInventory"]

_KEYS = ("admin:keys",)


@dataclass(frozen=True)
class KeyInventory:
    sealings: list[tuple[Sealing, bool]] = field(default_factory=list)
    """Each registered sealing, oldest first, and whether it is the model's pinned one."""
    versions: list[KeyVersionInfo] = field(default_factory=list)
    provider: str = ""
    registry_path: str = ""
    problem: str = ""
    """Why the provider or the registry could not be read; the lists are then empty."""

    @classmethod
    def read(cls, config: KeysConfig, data_path: Path) -> KeyInventory:
        """Blocking (a passphrase's scrypt, an HSM session): run it off the event loop."""
        try:
            provider = build_provider(config, data_path)
        except KeysError as exc:
            return cls(problem=text("The key provider cannot be opened: {reason}", reason=str(exc)))
        try:
            registry = seal_registry(config, data_path, provider)
            versions = provider.versions()
            try:
                body = registry.read()
            except KeysError as exc:
                problem = text("Seal registry: {reason}", reason=str(exc))
                return cls(versions=versions, provider=provider.kind, problem=problem)
            sealings = [(s, body.pins.get(s.model_id) == s.seal_id) for s in body.sealings]
            return cls(sealings, versions, provider.kind, str(registry.path))
        except KeysError as exc:
            return cls(problem=text("The key provider failed: {reason}", reason=str(exc)))
        finally:
            close = getattr(provider, "close", None)  # a PKCS#11 session; a key file holds none
            if close is not None:
                close()


def _context(console: Console, session: ConsoleSession, **extra: Any) -> dict[str, Any]:
    return {
        "me": session.principal,
        "csrf": session.csrf_token,
        "can_content": console.can(session, "audit:content"),
        "can_admin": console.can(session, "admin:policy"),
        "notice": "",
        "problem": "",
        **extra,
    }


async def _inventory(console: Console) -> KeyInventory:
    settings = console.services.settings
    return await asyncio.to_thread(KeyInventory.read, settings.keys, settings.data_path)


@get("/admin/keys")
async def keys_page(request: HTMXRequest) -> Template:
    console = Console.of(request)
    session = await console.page(request, _KEYS, "console keys", every_tenant=True)
    inventory = await _inventory(console)
    return Template(template_name="keys.html", context=_context(console, session, inventory=inventory))


@get("/admin/keys/rotate")
async def rotate_page(request: HTMXRequest) -> Template:
    """What rotation does, the current version, and the field to type it into."""
    console = Console.of(request)
    session = await console.page(request, _KEYS, "console key rotation page", every_tenant=True)
    inventory = await _inventory(console)
    return Template(template_name="keys_rotate.html", context=_context(console, session, inventory=inventory))


@post("/admin/keys/rotate", status_code=200)
async def rotate_key(request: HTMXRequest) -> Template:
    """Rotate (CSRF-checked POST, typed confirmation), then show the keys page with the new version."""
    console = Console.of(request)
    session = await console.page(request, _KEYS, "console key rotation", every_tenant=True)
    typed = str((await request.form()).get("confirm") or "")
    settings = console.services.settings
    sink = OfficerSink(console.services.audit_log, session.principal, asyncio.get_running_loop())
    try:
        async with console.key_rotation:
            report = await asyncio.to_thread(
                rotate_master_key, settings.keys, settings.data_path, typed, sink
            )
    except (RotationNotConfirmedError, KeysError) as exc:
        status = 400 if isinstance(exc, RotationNotConfirmedError) else 500
        inventory = await _inventory(console)
        context = _context(console, session, inventory=inventory, problem=str(exc))
        return Template(template_name="keys_rotate.html", context=context, status_code=status)
    inventory = await _inventory(console)
    notice = text(
        "Now {key}: {rewrapped} model(s) rewrapped, retired: {retired}.",
        key=str(report.new_key),
        rewrapped=len(report.rewrapped),
        retired=", ".join(str(r) for r in report.retired) or "–",
    )
    return Template(
        template_name="keys.html", context=_context(console, session, inventory=inventory, notice=notice)
    )


KEY_PAGES = [keys_page, rotate_page, rotate_key]
