from __future__ import annotations

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
