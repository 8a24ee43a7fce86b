"""One host: the systemd units as systemd reads them, the configs deploy/ ships as ``serve`` checks
them, and the offline-install pieces (wheelhouse requirements, the CPU torch of the Makefile)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
UNITS = ["strongroom.service", "strongroom-engine@.service"]

pytestmark = pytest.mark.integration


def _unit(tmp_path: Path, name: str) -> Path:
    """The unit with its ExecStart pointing at an executable that exists here (verify checks it)."""
    stub = tmp_path / "strongroom"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    text = (REPO / "deploy" / "systemd" / name).read_text()
    out = tmp_path / name.replace("@.", "@gpu0.")
    out.write_text(text.replace("/opt/strongroom/bin/strongroom", str(stub)))
    return out


@pytest.mark.parametrize("name", UNITS)
def test_units_pass_systemd_verify_with_no_warning(tmp_path: Path, name: str) -> None:
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "--recursive-errors=no", str(_unit(tmp_path, name))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize("name", UNITS)
def test_units_are_hardened(tmp_path: Path, name: str) -> None:
    unit = _unit(tmp_path, name)
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    (score,) = re.findall(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert float(score) <= 3.0, done.stdout  # the units before hardening scored 8.5
    text = unit.read_text()
    for line in (
        "NoNewPrivileges=true",
        "ProtectSystem=strict",
        "ProtectHome=true",
        "PrivateTmp=true",
        "CapabilityBoundingSet=\n",
        "EnvironmentFile=-/etc/strongroom/secrets.env",
    ):
        assert line in text
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M)
    assert exec_start is not None and "--host" not in exec_start[1]  # the config names the address


def _tls_material(tmp_path: Path) -> Path:
    spec = importlib.util.spec_from_file_location("k8s_secrets", REPO / "scripts" / "k8s_secrets.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "material"
    env = {
        "STRONGROOM_REDIS_URL": "redis://x",
        "STRONGROOM_AUDIT__POSTGRES_DSN": "host=x",
        "STRONGROOM_AUDIT__WITNESS_POSTGRES_DSN": "host=x",
        "STRONGROOM_ACCESS__POSTGRES_DSN": "host=x",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        module.create(out, release="s", namespace="n", cluster_domain="c", engines=1, days=30)
    return out


def _check(tmp_path: Path, config: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``config check`` on a shipped config with /etc/strongroom and data_dir under tmp_path."""
    etc, data = tmp_path / "etc" / "strongroom", tmp_path / "var" / "lib" / "strongroom"
    text = (REPO / "deploy" / "systemd" / config).read_text().replace("/etc/strongroom", str(etc))
    cfg = etc / config
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(text)
    full_env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "STRONGROOM_DATA_DIR": str(data), **env}
    return subprocess.run(
        [sys.executable, "-m", "strongroom", "config", "check", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        cwd=tmp_path,
    )


def test_single_host_config_starts_once_its_files_are_installed(tmp_path: Path) -> None:
    env = {
        "STRONGROOM_AUDIT__POSTGRES_DSN": "host=127.0.0.1 user=postgres dbname=test",
        "STRONGROOM_METRICS_TOKEN": "m" * 32,
    }
    before = _check(tmp_path, "strongroom.toml", env=env)
    assert before.returncode == 1
    assert {
        line.split(":")[1].strip() for line in before.stderr.splitlines() if line.startswith("error")
    } == {
        "server.tls.cert_file",
        "server.tls.key_file",
        "audit.signing_key_file",
        "audit.public_key_file",
        "keys.key_file",
    }
    # The installation steps of README "Single host": TLS files, master key, audit key pair.
    material = _tls_material(tmp_path)
    tls = tmp_path / "etc" / "strongroom" / "tls"
    tls.mkdir()
    (tls / "gateway.crt").write_bytes((material / "gateway" / "tls.crt").read_bytes())
    (tls / "gateway.key").write_bytes((material / "gateway" / "tls.key").read_bytes())
    keys = tmp_path / "var" / "lib" / "strongroom" / "keys"
    keys.mkdir(parents=True)
    (keys / "master.key").write_bytes((material / "engine" / "master.key").read_bytes())
    (keys / "master.key").chmod(0o600)
    (keys / "audit-signing-key.pem").write_bytes(
        (material / "gateway" / "audit-signing-key.pem").read_bytes()
    )
    from audit.signer import CheckpointSigner

    signer = CheckpointSigner.load(keys / "audit-signing-key.pem", create=False)
    (tmp_path / "etc" / "strongroom" / "audit-public-key.pem").write_bytes(signer.public_key_pem())
    after = _check(tmp_path, "strongroom.toml", "--connect", env=env)
    assert after.returncode == 0, after.stderr
    (warning,) = after.stderr.splitlines()  # the model is the operator's to seal and copy
    assert warning.startswith("warning: engine.models.0 (chat): out of service")


def test_standalone_engine_config_binds_off_loopback_only_with_mutual_tls(tmp_path: Path) -> None:
    material = _tls_material(tmp_path)
    tls = tmp_path / "etc" / "strongroom" / "tls"
    tls.mkdir(parents=True)
    for src, dst in (("tls.crt", "engine.crt"), ("tls.key", "engine.key"), ("ca.crt", "gateways-ca.crt")):
        (tls / dst).write_bytes((material / "engine" / src).read_bytes())
    keys = tmp_path / "var" / "lib" / "strongroom" / "keys"
    keys.mkdir(parents=True)
    (keys / "master.key").write_bytes((material / "engine" / "master.key").read_bytes())
    (keys / "master.key").chmod(0o600)
    done = _check(tmp_path, "engine.toml", "--role", "engine", env={"STRONGROOM_ENGINE_TOKEN": "t" * 43})
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[1].strip() for line in done.stderr.splitlines()] == ["engine.models.0 (chat)"]


def test_wheelhouse_requirements_pin_every_wheel_by_hash(tmp_path: Path) -> None:
    for name in ("Foo_Bar-1.2-py3-none-any.whl", "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"):
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "constraints.txt").write_text("torch==2.13.0+cpu\n")
    script = REPO / "scripts" / "wheelhouse_requirements.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, check=True
    )
    digest = hashlib.sha256(b"torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").hexdigest()
    assert done.stdout.splitlines()[1:] == [
        f"foo-bar==1.2 --hash=sha256:{hashlib.sha256(b'Foo_Bar-1.2-py3-none-any.whl').hexdigest()}",
        f"torch==2.13.0+cpu --hash=sha256:{digest}",
    ]
    (tmp_path / "foo_bar-1.3-py3-none-any.whl").write_bytes(b"x")
    (tmp_path / "bar-1.0.tar.gz").write_bytes(b"x")
    bad = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 1 and "two wheels of foo-bar" in bad.stderr


def test_make_installs_the_cpu_build_of_torch_by_default() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "install", "PY=python-stub"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '"torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu' in plan
    gpu = subprocess.run(
        ["make", "-n", "-B", "install", "PY=python-stub", "TORCH_VARIANT=cu128"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '"torch==2.13.0+cu128" --extra-index-url https://download.pytorch.org/whl/cu128' in gpu
