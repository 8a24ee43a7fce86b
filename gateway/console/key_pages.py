"""The key officer's read-only page: sealed models in the seal registry and the master key's
versions. Needs ``admin:keys`` in every tenant (keys and models serve all of them).

The gateway holds no key provider (the engines do), so the page opens the configured one for the
view and closes it after; when it cannot be opened (HSM down, passphrase not set, no key file)
the page says so instead. Public facts only: ids, versions, digests, paths, public keys.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from litestar import get
from litestar.response import Template
from litestar_htmx import HTMXRequest

from gateway.console.console import Console
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
            return cls(problem=f"The key provider cannot be opened: {exc}")
        try:
            registry = seal_registry(config, data_path, provider)
            versions = provider.versions()
            try:
                body = registry.read()
            except KeysError as exc:
                return cls(versions=versions, provider=provider.kind, problem=f"Seal registry: {exc}")
            sealings = [(s, body.pins.get(s.model_id) == s.seal_id) for s in body.sealings]
            return cls(sealings, versions, provider.kind, str(registry.path))
        except KeysError as exc:
            return cls(problem=f"The key provider failed: {exc}")
        finally:
            close = getattr(provider, "close", None)  # a PKCS#11 session; a key file holds none
            if close is not None:
                close()


@get("/admin/keys")
async def keys_page(request: HTMXRequest) -> Template:
    console = Console.of(request)
    session = await console.page(request, _KEYS, "console keys", every_tenant=True)
    settings = console.services.settings
    inventory = await asyncio.to_thread(KeyInventory.read, settings.keys, settings.data_path)
    context = {
        "me": session.principal,
        "csrf": session.csrf_token,
        "can_content": console.can(session, "audit:content"),
        "can_admin": console.can(session, "admin:policy"),
        "inventory": inventory,
    }
    return Template(template_name="keys.html", context=context)


KEY_PAGES = [keys_page]
