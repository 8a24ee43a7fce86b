"""Issue 24: the master key rotated from the console, behind a typed confirmation and a CSRF-checked
POST, by ``keys.rotation.rotate`` (the CLI's code path): a registered sealed model is rewrapped
and still opens, the old version is retired, the keys page shows the new version, and every key
operation is recorded with the administrator's identity."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient

from audit.query import AuditQuery
from keys.key_file_provider import KeyFileProvider
from keys.provider import KeyStatus
from keys.seal_registry import SealRegistry
from keys.sealed_model import open_model
from keys.sealer import seal_model
from tests.unit.gateway.console.console_app import console_app, details, rows, sign_in


def test_an_administrator_rotates_the_master_key_after_typing_its_version(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "master.key"
    provider = KeyFileProvider.create(key_file)
    registry = SealRegistry(tmp_path / "keys" / "sealings.json", provider)
    model = tmp_path / "sealed" / "demo-chat"
    seal_model({"weights.bin": b"w" * 100}, model, "demo-chat", provider, chunk_size=64, registry=registry)
    (v1,) = provider.versions()

    async def go() -> None:
        state: dict[str, Any] = {}
        async with AsyncTestClient(console_app(tmp_path, state)) as client:
            csrf = await sign_in(client, tmp_path, "root", "admin")
            keys = await client.get("/console/admin/keys")
            assert 'href="/console/admin/keys/rotate"' in keys.text
            confirm = await client.get("/console/admin/keys/rotate")
            assert confirm.status_code == 200 and f'data-testid="current-version">{v1.ref}<' in confirm.text

            # No CSRF token, or a wrong version typed: nothing rotates.
            forged = await client.post("/console/admin/keys/rotate", data={"confirm": str(v1.ref)})
            assert forged.status_code == 403
            wrong = await client.post("/console/admin/keys/rotate", data={"_csrf": csrf, "confirm": "yes"})
            assert wrong.status_code == 400 and f"type {v1.ref} to confirm" in wrong.text
            assert KeyFileProvider.load(key_file).versions() == [v1]

            done = await client.post(
                "/console/admin/keys/rotate", data={"_csrf": csrf, "confirm": f" {v1.ref} "}
            )
            assert done.status_code == 200, done.text
            now = KeyFileProvider.load(key_file)
            current = [v.ref for v in now.versions() if v.status is KeyStatus.CURRENT]
            assert [r.version for r in current] == [2]
            assert f"Now {current[0]}: 1 model(s) rewrapped, retired: {v1.ref}." in done.text
            assert [r.split()[1:3] for r in rows(done.text, "key-versions")][-1] == ["2", "current"]

            # The page a second click would post from is stale now: refused, nothing rotates again.
            again = await client.post(
                "/console/admin/keys/rotate", data={"_csrf": csrf, "confirm": str(v1.ref)}
            )
            assert again.status_code == 400
            assert len(KeyFileProvider.load(key_file).versions()) == len(now.versions())

            page = await state["log"].search(AuditQuery(event_type="key_operation", limit=100))
            ops = [(r.event.subject, r.event.client_app, r.event.detail) for r in page.records]
            assert {s for s, _, _ in ops} == {"root"} and {c for _, c, _ in ops} == {"console"}
            assert [d.split('"operation":"')[1].split('"')[0] for _, _, d in ops] == [
                "rotate",
                "rewrap",
                "retire",
            ]
            assert "console key rotation" in [d for _, d, _ in await details(state["log"], "root")]

            client.cookies.clear()
            officer_csrf = await sign_in(client, tmp_path, "wang", "compliance")
            refused = await client.post(
                "/console/admin/keys/rotate", data={"_csrf": officer_csrf, "confirm": str(current[0])}
            )
            assert refused.status_code == 403
            assert (await client.get("/console/admin/keys/rotate")).status_code == 403

    asyncio.run(go())
    # Rewrapped under v2, with v1 retired: the model still opens.
    open_model(model, KeyFileProvider.load(key_file), audit=None, process="test").close()
