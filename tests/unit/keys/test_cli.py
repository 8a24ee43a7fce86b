from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from audit.config import AuditConfig
from audit.log import AuditLog
from keys.cli import keys, models


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "strongroom.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[keys]\npassphrase_env = "KEYS_CLI_TEST_PASS"\n')
    return str(path)


def test_init_seal_verify_rotate_unseal(tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS_CLI_TEST_PASS", "cli passphrase")
    runner = CliRunner()
    result = runner.invoke(keys, ["init", "--config", config])
    assert result.exit_code == 0, result.output
    key_file = tmp_path / "data" / "keys" / "master.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert "cli passphrase" not in key_file.read_text()

    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text('{"a": 1}')
    dst = tmp_path / "data" / "models" / "tiny"
    result = runner.invoke(models, ["seal", str(src), str(dst), "--config", config])
    assert result.exit_code == 0 and "as 'tiny'" in result.output, result.output
    result = runner.invoke(models, ["verify", str(dst), "--config", config])
    assert result.exit_code == 0 and result.output.startswith("ok tiny"), result.output

    result = runner.invoke(keys, ["rotate", "--config", config])
    assert result.exit_code == 0 and "rewrapped 1 model" in result.output and "retired" in result.output
    result = runner.invoke(keys, ["show", "--config", config])
    lines = result.output.splitlines()
    assert [line.split("\t")[1] for line in lines] == ["retired", "current"]
    as_json = runner.invoke(keys, ["show", "--json", "--config", config])
    rows = [json.loads(line) for line in as_json.output.splitlines()]
    assert [(r["ref"], r["status"]) for r in rows] == [tuple(line.split("\t")[:2]) for line in lines]
    listed = runner.invoke(models, ["list", "--json", "--config", config])
    (sealing,) = [json.loads(line) for line in listed.output.splitlines()]
    assert sealing["model_id"] == "tiny" and sealing["pinned"] is False and sealing["path"] == str(dst)

    out = tmp_path / "export"
    result = runner.invoke(models, ["unseal", str(dst), str(out), "--config", config])
    assert result.exit_code != 0 and "export" in result.output and not out.exists()
    result = runner.invoke(models, ["unseal", str(dst), str(out), "--export", "--config", config])
    assert result.exit_code == 0 and (out / "config.json").read_text() == '{"a": 1}'

    # Every one of those key operations is in the log, with the OS user and host that ran it.
    identity = f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}"
    events = [r.event for r in _records(tmp_path / "data")]
    assert {e.client_app for e in events} == {f"cli:{identity}"} and {e.subject for e in events} == {identity}
    operations = [json.loads(e.detail)["operation"] for e in events]
    assert operations[:2] == ["init", "seal"]
    assert {"rotate", "rewrap", "retire"} <= set(operations)
    assert operations[-1] == "export" and operations.count("export") == 1


def _records(data_dir: Path) -> list:  # type: ignore[type-arg]
    async def read() -> list:  # type: ignore[type-arg]
        log = await AuditLog.open(AuditConfig(), data_dir, heartbeat=False, record_lifecycle=False)
        try:
            return await log.tail(1000)
        finally:
            await log.close()

    return asyncio.run(read())


def test_export_refuses_to_start_unrecorded(
    tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYS_CLI_TEST_PASS", "cli passphrase")
    runner = CliRunner()
    assert runner.invoke(keys, ["init", "--config", config]).exit_code == 0
    src, dst, out = tmp_path / "hf", tmp_path / "data" / "models" / "tiny", tmp_path / "export"
    src.mkdir()
    (src / "config.json").write_text('{"a": 1}')
    assert runner.invoke(models, ["seal", str(src), str(dst), "--config", config]).exit_code == 0
    (tmp_path / "a-folder.db").mkdir()
    monkeypatch.setenv("STRONGROOM_AUDIT__SQLITE_PATH", str(tmp_path / "a-folder.db"))  # no log opens
    result = runner.invoke(models, ["unseal", str(dst), str(out), "--export", "--config", config])
    assert result.exit_code == 1 and "audited" in result.output
    assert not (out / "config.json").exists()


def test_errors_are_clean_messages(tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS_CLI_TEST_PASS", "x")
    (tmp_path / "m").mkdir()
    result = CliRunner().invoke(models, ["verify", str(tmp_path / "m"), "--config", config])
    assert result.exit_code == 1 and "key file not found" in result.output


def test_rotate_keeps_models_sealed_outside_the_data_dir_loadable(
    tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pen-test finding 7: rotation rewrapped only <data_dir>/models/* and then retired the old key,
    so a model sealed at another path (the README's own example) no longer loaded."""
    monkeypatch.setenv("KEYS_CLI_TEST_PASS", "cli passphrase")
    runner = CliRunner()
    assert runner.invoke(keys, ["init", "--config", config]).exit_code == 0
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text('{"a": 1}')
    outside = tmp_path / "models-elsewhere" / "qwen3.sealed"
    result = runner.invoke(
        models, ["seal", str(src), str(outside), "--model-id", "qwen3", "--config", config]
    )
    assert result.exit_code == 0 and "'qwen3' v1" in result.output, result.output

    result = runner.invoke(keys, ["rotate", "--config", config])
    assert result.exit_code == 0 and "rewrapped 1 model" in result.output, result.output
    result = runner.invoke(models, ["verify", str(outside), "--name", "qwen3", "--config", config])
    assert result.exit_code == 0 and "/v2, manifest sha256:" in result.output, result.output

    listed = runner.invoke(models, ["list", "--config", config])
    assert listed.exit_code == 0 and listed.output.startswith("qwen3\tv1\t"), listed.output
    result = runner.invoke(models, ["verify", str(outside), "--name", "other", "--config", config])
    assert result.exit_code == 1 and "sealed as 'qwen3'" in result.output
