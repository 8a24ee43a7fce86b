"""Sealing and verifying report their progress in plaintext bytes; the CLI draws it on a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from keys_testing import CHUNK

from keys import KeyFileProvider, seal_model, verify_model
from keys.rotation import rotate
from keys.sealed_model import unseal_model
from strongroom.cli.keys import keys, models
from tests.terminal import run_on_terminal

REPO = Path(__file__).resolve().parents[3]


def test_seal_and_verify_report_every_chunk_up_to_the_total(
    tmp_path: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]
) -> None:
    total = sum(len(data) for data in plain_files.values())
    sealed: list[tuple[int, int]] = []
    dst = tmp_path / "m"
    seal_model(plain_files, dst, "m", provider, chunk_size=CHUNK, progress=lambda d, t: sealed.append((d, t)))
    checked: list[tuple[int, int]] = []
    verify_model(dst, provider, progress=lambda d, t: checked.append((d, t)))
    for calls in (sealed, checked):
        assert calls[-1] == (total, total)
        assert {t for _, t in calls} == {total}
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    # One report per sealed chunk: the 3-and-a-bit-chunk file alone gives four.
    assert len(sealed) >= 4 + 2


def _config_and_model(tmp_path: Path) -> tuple[Path, Path]:
    """A config with its data_dir under tmp_path, and a plain model directory to seal."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text("{}")
    return cfg, src


def test_cli_draws_a_bar_on_a_terminal_and_none_in_a_pipe(tmp_path: Path) -> None:
    cfg, src = _config_and_model(tmp_path)
    (src / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TERM": "dumb", "COLUMNS": "100"}
    cli = [sys.executable, "-m", "strongroom"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=60, check=True)

    run("keys", "init", "--config", str(cfg))
    dst = tmp_path / "data" / "models" / "tiny"
    piped = run("models", "seal", "--config", str(cfg), str(src), str(dst))
    assert "sealing" not in piped.stderr and piped.stdout.startswith("sealed 2 file(s)")
    tty = run_on_terminal([*cli, "models", "verify", "--config", str(cfg), str(dst)], env)
    assert "verifying tiny" in tty.stdout and "100%" in tty.stdout
    assert "ok tiny: 2 file(s)" in tty.stdout


def test_rotation_counts_models_and_unsealing_counts_bytes_checked_then_written(
    tmp_path: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]
) -> None:
    total = sum(len(data) for data in plain_files.values())
    dirs = [tmp_path / "a", tmp_path / "b"]
    for dst in dirs:
        seal_model(plain_files, dst, dst.name, provider, chunk_size=CHUNK)
    rotated: list[tuple[int, int]] = []
    rotate(provider, dirs, progress=lambda d, t: rotated.append((d, t)))
    assert rotated == [(1, 2), (2, 2)]
    unsealed: list[tuple[int, int]] = []
    unseal_model(
        dirs[0], tmp_path / "plain", provider, export=True, progress=lambda d, t: unsealed.append((d, t))
    )
    assert {t for _, t in unsealed} == {2 * total}
    done = [d for d, _ in unsealed]
    assert done == sorted(done) and total in done and done[-1] == 2 * total
    assert (tmp_path / "plain" / "model.safetensors").read_bytes() == plain_files["model.safetensors"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("on_terminal", [False, True])
def test_rotate_and_unseal_draw_a_bar_on_a_terminal_only(
    tmp_path: Path, on_terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, src = _config_and_model(tmp_path)
    terminal = _Terminal()
    if on_terminal:  # CliRunner's own stderr is never a terminal, as in a pipe or a log
        monkeypatch.setattr("strongroom.progress_bar.sys", SimpleNamespace(stderr=terminal))
    cli = CliRunner()
    for args in (
        ["keys", "init"],
        ["models", "seal", str(src), str(tmp_path / "data" / "models" / "tiny")],
        ["keys", "rotate"],
        ["models", "unseal", "--export", str(tmp_path / "data" / "models" / "tiny"), str(tmp_path / "out")],
    ):
        group, *rest = args
        done = cli.invoke(keys if group == "keys" else models, [*rest, "--config", str(cfg)])
        assert done.exit_code == 0, done.output
        assert "%" not in done.output and "rewrapping" not in done.output and "exporting " not in done.output
    assert done.output == f"exported plaintext to {tmp_path / 'out'}\n"
    drawn = terminal.getvalue()
    if on_terminal:
        assert "rewrapping models" in drawn and "exporting tiny" in drawn and "100%" in drawn
    else:
        assert drawn == ""
