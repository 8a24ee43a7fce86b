from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from audit.config import AuditConfig
from audit.log import AuditLog
from audit.operator_log import OperatorLog
from strongroom.cli.audit import audit
from tests.audit_doubles import sample_event as event


def _seed(tmp_path: Path) -> Path:
    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path / "data")
        for i in range(5):
            await log.append(event(i))
        await log.close()

    asyncio.run(go())
    config = tmp_path / "strongroom.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    return config


def test_tail_search_export_verify(tmp_path: Path) -> None:
    config = str(_seed(tmp_path))
    cli = CliRunner()

    tail = cli.invoke(audit, ["tail", "--config", config, "-n", "2"])
    assert tail.exit_code == 0, tail.output
    assert tail.output.splitlines()[0].startswith("#6 ") and "service_stop" in tail.output

    as_json = cli.invoke(audit, ["tail", "--config", config, "-n", "1", "--json"])
    assert json.loads(as_json.output)["event"]["event_type"] == "service_stop"

    found = cli.invoke(audit, ["search", "--config", config, "--model", "qwen-7b", "--json"])
    assert [json.loads(line)["event"]["request_id"] for line in found.output.splitlines()] == [
        "req-1",
        "req-3",
    ]

    bundle = tmp_path / "out.jsonl"
    assert cli.invoke(audit, ["export", "--config", config, str(bundle)]).exit_code == 0
    key = tmp_path / "audit.pub"
    key.write_text(cli.invoke(audit, ["public-key", "--config", config]).output)
    ok = cli.invoke(audit, ["verify", "--file", str(bundle), "--public-key", str(key)])
    assert ok.exit_code == 0 and ok.output.startswith("OK:")
    live = cli.invoke(audit, ["verify", "--config", config])
    assert live.exit_code == 0, live.output

    lines = bundle.read_text().splitlines()
    lines[3] = lines[3].replace("req-1", "req-9")
    bundle.write_text("\n".join(lines) + "\n")
    bad = cli.invoke(audit, ["verify", "--file", str(bundle), "--public-key", str(key)])
    assert bad.exit_code == 1 and "FAILED at record 3" in bad.output

    # The CLI's own search and export are audited.
    tail = cli.invoke(audit, ["tail", "--config", config, "-n", "5", "--json"])
    details = [json.loads(line)["event"].get("detail", "") for line in tail.output.splitlines()]
    assert any(d.startswith("search ") for d in details) and any(d.startswith("export ") for d in details)


def test_verify_file_needs_a_trusted_key(tmp_path: Path) -> None:
    bundle = tmp_path / "x.jsonl"
    bundle.write_text("{}\n")
    result = CliRunner().invoke(audit, ["verify", "--file", str(bundle)])
    assert result.exit_code == 2 and "--public-key" in result.output


def test_a_pinned_fingerprint_makes_verify_vouch_for_the_key(tmp_path: Path) -> None:
    config = _seed(tmp_path)
    cli = CliRunner()
    unpinned = cli.invoke(audit, ["verify", "--config", str(config)])
    assert unpinned.exit_code == 0 and "no trusted public key is pinned" in unpinned.output
    fingerprint = cli.invoke(audit, ["public-key", "--config", str(config), "--fingerprint"]).output.strip()
    assert fingerprint.startswith("sha256:") and len(fingerprint) == 7 + 64
    config.write_text(config.read_text() + f'[audit]\npublic_key_fingerprint = "{fingerprint}"\n')
    pinned = cli.invoke(audit, ["verify", "--config", str(config)])
    assert pinned.exit_code == 0 and pinned.output.startswith("OK:") and "WARNING" not in pinned.output


def test_commands_after_a_clean_stop_leave_it_clean(tmp_path: Path) -> None:
    """Issue 17, finding 7: every command appended a non-final checkpoint, so ``verify`` exited 3
    ("writer stopped uncleanly") once it was older than two intervals. Reads now write nothing; an
    audited command, run with no gateway, ends with a final checkpoint of its own."""
    config = _seed(tmp_path)
    config.write_text(config.read_text() + "[audit]\ncheckpoint_interval_s = 0.05\n")
    db = tmp_path / "data" / "audit" / "audit.db"
    cli = CliRunner()
    before = db.read_bytes()
    for args in (["tail"], ["verify"], ["public-key"]):
        assert cli.invoke(audit, [*args, "--config", str(config)]).exit_code == 0
    assert db.read_bytes() == before
    for args in (["search", "--model", "qwen-7b"], ["export", str(tmp_path / "out.jsonl")]):
        assert cli.invoke(audit, [*args, "--config", str(config)]).exit_code == 0
    time.sleep(0.2)
    result = cli.invoke(audit, ["verify", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "stopped uncleanly" not in result.output


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_export_reports_records_written_and_the_cli_draws_nothing_in_a_pipe(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _seed(tmp_path)
    monkeypatch.setattr("audit.export_progress.REPORT_EVERY", 2)
    calls: list[tuple[int, int]] = []

    async def go() -> int:
        log = OperatorLog(AuditConfig(), tmp_path / "data")
        try:
            out = tmp_path / f"lib.{fmt}"
            return await log.export(
                out, fmt=fmt, first_seq=1, last_seq=None, progress=lambda d, t: calls.append((d, t))
            )
        finally:
            await log.close()

    count = asyncio.run(go())
    assert count == 7 and calls == [(2, 7), (4, 7), (6, 7), (7, 7)]
    out = tmp_path / f"cli.{fmt}"
    done = CliRunner().invoke(audit, ["export", "--config", str(config), "--format", fmt, str(out)])
    assert done.exit_code == 0 and done.output == f"exported 8 records to {out}\n"
    terminal = _Terminal()
    monkeypatch.setattr("strongroom.progress_bar.sys", SimpleNamespace(stderr=terminal))
    done = CliRunner().invoke(
        audit, ["export", "--config", str(config), "--format", fmt, str(tmp_path / "t")]
    )
    assert done.exit_code == 0 and "exporting to t" in terminal.getvalue() and "100%" in terminal.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True
