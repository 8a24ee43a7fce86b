"""The ``serve`` banner's commands work as printed in a new shell."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from strongroom.banner import banner
from strongroom.config import load_settings


def _settings(tmp_path: Path, toml: str) -> tuple[str, object]:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "d"}"\n{toml}')
    return str(cfg), load_settings(cfg, environ={})


def test_dev_banner_names_this_install_the_config_and_the_served_models(tmp_path: Path) -> None:
    cfg, settings = _settings(tmp_path, '[[engine.models]]\nname = "m1"\npath = "models/m1"\n')
    text = banner(settings, "127.0.0.1", 8000, config_path=cfg)  # type: ignore[arg-type]
    (token_line,) = [line for line in text.splitlines() if "export TOKEN" in line]
    command = shlex.split(token_line.split("$(", 1)[1].rsplit(")", 1)[0])
    # Absolute, so it runs with no venv on PATH; it reads the same config as the gateway.
    assert Path(command[0]).is_absolute() or command[0] == sys.executable
    assert command[-6:] == ["--config", cfg, "--sub", "alice", "--role", "analyst"][-6:]
    minted = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True, cwd="/")
    assert minted.stdout.count(".") == 2  # a JWT, signed by the dev key of the config's data_dir
    assert (tmp_path / "d" / "keys").is_dir()
    assert '"model": "m1"' in text and "demo-chat" not in text and "Models served: m1." in text


def test_without_the_dev_issuer_no_dev_token_is_suggested(tmp_path: Path) -> None:
    cfg, settings = _settings(
        tmp_path,
        '[auth]\ndev_issuer = false\n[[auth.issuers]]\nissuer = "https://idp"\naudiences = ["a"]\n'
        'algorithms = ["RS256"]\njwks_url = "https://idp/jwks"\n',
    )
    text = banner(settings, "0.0.0.0", 8443, scheme="https", config_path=cfg)  # type: ignore[arg-type]
    assert " token --" not in text and "identity provider" in text
    assert "https://127.0.0.1:8443/v1" in text


def test_the_grpc_port_is_named_unless_it_is_off(tmp_path: Path) -> None:
    _, settings = _settings(tmp_path, "[grpc]\nport = 50099\n")
    text = banner(settings, "127.0.0.1", 8000)  # type: ignore[arg-type]
    assert "gRPC API (plaintext) on 127.0.0.1:50099" in text
    _, off = _settings(tmp_path, "[grpc]\nenabled = false\n")
    assert "gRPC" not in banner(off, "127.0.0.1", 8000)  # type: ignore[arg-type]
