from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from policies.cli import admin


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "strongroom.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    return str(path)


def call(config: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(admin, [*args, "--config", config], env={"STRONGROOM_REDIS_URL": ""})
    return result.exit_code, result.output


def test_grant_check_show_ungrant(config: str) -> None:
    assert call(config, "check", "chat", "demo-base", "--role", "analyst")[0] == 1
    code, out = call(config, "grant", "analyst", "demo-base", "--action", "chat", "--actor", "ops")
    assert code == 0 and "policy version 2" in out
    code, out = call(config, "check", "chat", "demo-base", "--role", "analyst")
    assert code == 0 and out.startswith("allowed")
    code, out = call(config, "show")
    assert "# policy version 2" in out and "p, analyst, *, demo-base, chat" in out
    assert call(config, "grant", "analyst", "demo-base")[0] == 1  # already there
    assert call(config, "ungrant", "analyst", "demo-base")[0] == 0
    assert call(config, "check", "chat", "demo-base", "--role", "analyst")[0] == 1


def test_assign_and_show_user(config: str) -> None:
    assert call(config, "assign", "auditor", "--user", "carol")[0] == 0
    code, out = call(config, "show", "--user", "carol")
    assert code == 0 and '"auditor"' in out and "audit:read" in out
    assert call(config, "check", "audit:read", "--user", "carol")[0] == 0
    assert call(config, "unassign", "auditor", "--user", "carol")[0] == 0
    assert call(config, "check", "audit:read", "--user", "carol")[0] == 1


def test_invalid_input_is_explained(config: str) -> None:
    code, out = call(config, "grant", "analyst", "x", "--action", "fly")
    assert code == 2 and "action 'fly' is unknown" in out
    code, out = call(config, "assign", "auditor")
    assert code == 2 and "exactly one of --user or --member-role" in out
    code, out = call(config, "ungrant", "analyst", "never-granted")
    assert code == 1 and "not in the policy" in out


def test_the_policy_import_of_a_new_store_is_recorded_by_whoever_creates_it(
    config: str, tmp_path: Path
) -> None:
    """A CLI command that creates the policy store (seeding it from the packaged policy) records
    that import with the operator, as the gateway does at its first start; a second command finds
    the store and records nothing more."""
    import asyncio

    from audit.config import AuditConfig
    from audit.log import AuditLog
    from audit.query import AuditQuery

    assert call(config, "check", "chat", "demo-chat", "--role", "analyst")[0] == 0
    assert call(config, "show")[0] == 0

    async def imports() -> list[str]:
        log = await AuditLog.open(AuditConfig(), tmp_path / "data")
        try:
            page = await log.search(AuditQuery(event_type="admin_change", limit=50))
        finally:
            await log.close()
        return [r.event.detail for r in page.records if r.event.detail.startswith("policy import:")]

    found = asyncio.run(imports())
    assert len(found) == 1 and "created from the seed policy" in found[0], found


def test_json_holds_what_the_text_form_lists(config: str) -> None:
    assert call(config, "grant", "analyst", "demo-base", "--action", "chat", "--actor", "ops")[0] == 0
    assert call(config, "assign", "auditor", "--user", "carol")[0] == 0
    _, text = call(config, "show")
    code, out = call(config, "show", "--json")
    policy = json.loads(out)
    assert code == 0 and len(out.splitlines()) == 1
    assert f"# policy version {policy['version']}" in text
    rows = [", ".join(("p", g["role"], g["domain"], g["pattern"], g["action"])) for g in policy["grants"]]
    rows += [", ".join(("g", a["member"], a["role"], a["domain"])) for a in policy["assignments"]]
    assert rows == text.splitlines()[1:]
    _, pretty = call(config, "show", "--user", "carol")
    code, out = call(config, "show", "--user", "carol", "--json")
    assert code == 0 and len(out.splitlines()) == 1 and json.loads(out) == json.loads(pretty)
    code, out = call(config, "check", "chat", "demo-base", "--role", "analyst", "--json")
    assert code == 0
    assert json.loads(out) == {
        "allowed": True,
        "action": "chat",
        "model": "demo-base",
        "policy_version": policy["version"],
    }
    code, out = call(config, "check", "chat", "demo-base", "--user", "carol", "--json")
    assert code == 1 and json.loads(out)["allowed"] is False
