"""Sealing and verifying report their progress in plaintext bytes; the CLI draws it on a terminal."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from keys_testing import CHUNK

from keys import KeyFileProvider, seal_model, verify_model

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


def test_cli_draws_a_bar_on_a_terminal_and_none_in_a_pipe(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TERM": "dumb", "COLUMNS": "100"}
    cli = [sys.executable, "-m", "strongroom"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=60, check=True)

    run("keys", "init", "--config", str(cfg))
    dst = tmp_path / "data" / "models" / "tiny"
    piped = run("models", "seal", "--config", str(cfg), str(src), str(dst))
    assert "sealing" not in piped.stderr and piped.stdout.startswith("sealed 2 file(s)")
    command = shlex.join([*cli, "models", "verify", "--config", str(cfg), str(dst)])
    tty = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "verifying tiny" in tty.stdout and "100%" in tty.stdout
    assert "ok tiny: 2 file(s)" in tty.stdout
