import json
from pathlib import Path

from click.testing import CliRunner
from filter_fixtures import write_policy

from filters.cli import filters


def test_scan_prints_positions_and_actions_without_values(tmp_path: Path) -> None:
    runner = CliRunner()
    text = "卡号 6222 0212 3456 7890 128 邮箱是zhang.san@example.com谢谢"
    result = runner.invoke(filters, ["scan"], input=text, env={"STRONGROOM_CONFIG": ""})
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out == {
        "blocked": False,
        "findings": [
            {"type": "payment_card", "start": 3, "end": 26, "action": "mask"},
            {"type": "email", "start": 30, "end": 51, "action": "redact"},
        ],
    }
    assert "zhang" not in result.output
    assert text[3:26] == "6222 0212 3456 7890 128"


def test_scan_with_a_draft_policy_and_role(tmp_path: Path) -> None:
    draft = write_policy(
        tmp_path, '[actions]\nemail = "block"\n[[rules]]\ndetectors=["email"]\nroles=["ops"]\naction="off"\n'
    )
    runner = CliRunner()
    blocked = runner.invoke(
        filters, ["scan", "--policy", str(draft)], input="a@b.com", env={"STRONGROOM_CONFIG": ""}
    )
    assert json.loads(blocked.output)["blocked"] is True
    ops = runner.invoke(
        filters,
        ["scan", "--policy", str(draft), "--role", "ops"],
        input="a@b.com",
        env={"STRONGROOM_CONFIG": ""},
    )
    assert json.loads(ops.output) == {"blocked": False, "findings": []}


def test_scan_with_an_invalid_draft_fails(tmp_path: Path) -> None:
    draft = write_policy(tmp_path, 'on_error = "flag"\n')
    result = CliRunner().invoke(
        filters, ["scan", "--policy", str(draft)], input="x", env={"STRONGROOM_CONFIG": ""}
    )
    assert result.exit_code == 1
    assert "on_error" in result.output
