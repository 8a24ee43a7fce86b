"""``strongroom config check``: one line per problem, exit 1; the same checks stop ``serve``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strongroom.config import load_settings
from strongroom.config_check import ConfigCheck
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[3]


def _check(tmp_path: Path, toml: str, role: str = "serve", **environ: str) -> list[str]:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n{toml}')
    settings = load_settings(cfg, environ={})
    return ConfigCheck(settings, role, environ).problems()  # type: ignore[arg-type]


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strongroom", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **(env or {})},
        timeout=60,
    )


def test_embedded_defaults_and_the_shipped_example_pass(tmp_path: Path) -> None:
    assert _check(tmp_path, "") == []
    done = _cli(
        "config",
        "check",
        "--strict",
        "--config",
        str(REPO / "deploy" / "strongroom.example.toml"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")


def test_every_problem_is_listed_at_once_one_line_each(tmp_path: Path) -> None:
    problems = _check(
        tmp_path,
        '[server]\nhost = "0.0.0.0"\ntls = { cert_file = "tls/gw.crt", key_file = "tls/gw.key" }\n'
        '[keys]\nprovider = "pkcs11"\npkcs11_module = "/nonexistent/libvendor.so"\n'
        'pkcs11_token_label = "strongroom"\npkcs11_pin_env = "HSM_PIN"\n'
        "[audit]\ncreate_signing_key = false\n",
    )
    keys = sorted(p.split(":", 1)[0] for p in problems if not p.is_warning)
    assert keys == [
        "audit.signing_key_file",
        "keys.pkcs11_module",
        "keys.pkcs11_pin_env",  # $HSM_PIN unset
        "server.host",  # the dev issuer is on off loopback
        "server.tls.cert_file",
        "server.tls.key_file",
    ]
    assert all("\n" not in p for p in problems)


def test_standalone_engine_needs_mutual_tls_off_loopback_and_its_token(tmp_path: Path) -> None:
    problems = _check(tmp_path, '[engine_listener]\nhost = "0.0.0.0"\n', role="engine")
    assert [p.split(":", 1)[0] for p in problems] == ["engine_listener.host", "server.engine_token_env"]
    assert _check(tmp_path, "", role="engine", STRONGROOM_ENGINE_TOKEN="t" * 32) == []


def test_a_key_the_process_would_not_create_is_required(tmp_path: Path) -> None:
    model = tmp_path / "data" / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    toml = '[[engine.models]]\nname = "m"\npath = "models/m"\n'
    (problem,) = _check(tmp_path, toml)
    assert problem.startswith("keys.key_file: file not found")
    # Demo models only: serve creates a dev key on first start, nothing is missing.
    assert _check(tmp_path, "") == []


def test_a_missing_model_is_a_warning_the_others_still_serve(tmp_path: Path) -> None:
    (problem,) = _check(
        tmp_path, '[keys]\nrequire_sealed = false\n[[engine.models]]\nname = "m"\npath = "models/m"\n'
    )
    assert problem.is_warning and problem.startswith("engine.models.0 (m): out of service")


def test_connect_reaches_redis_and_postgres_and_never_prints_a_password(tmp_path: Path) -> None:
    cfg = load_settings(None, environ={"STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/15"})
    assert ConfigCheck(cfg, "serve", {}).problems(connect=True) == []
    port = free_port()
    bad = load_settings(
        None,
        environ={
            "STRONGROOM_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "STRONGROOM_AUDIT__BACKEND": "postgres",
            "STRONGROOM_AUDIT__POSTGRES_DSN": "host=127.0.0.1 user=postgres dbname=no_such_db password=sekrit-pw",
        },
    )
    problems = ConfigCheck(bad, "serve", {}).problems(connect=True)
    assert [p.split(":", 1)[0] for p in problems] == ["redis_url", "audit.postgres_dsn"]
    assert "no_such_db" in problems[1] and not any("sekrit-pw" in p for p in problems)


def test_cli_exits_1_with_one_line_per_problem_and_serve_refuses_the_same(tmp_path: Path) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        '[keys]\nprovider = "pkcs11"\npkcs11_module = "/nonexistent/lib.so"\n'
        'pkcs11_token_label = "strongroom"\npkcs11_pin_env = "HSM_PIN"\n'
    )
    done = _cli("config", "check", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: keys.pkcs11_module: PKCS#11 module not found: /nonexistent/lib.so",
        "error: keys.pkcs11_pin_env: environment variable $HSM_PIN is unset or empty (the HSM user PIN)",
    ]
    served = _cli("serve", "--config", str(cfg), "--port", str(free_port()), cwd=tmp_path)
    assert served.returncode == 1
    assert "Traceback" not in served.stderr
    assert "keys.pkcs11_module: PKCS#11 module not found" in served.stderr
    assert not (tmp_path / "data").exists(), "a refused start must not create the data directory"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("audit", "search", "--since", "yesterday"), "invalid time 'yesterday'"),
        (("audit", "tail"), "no audit log at"),
        (("config", "show", "--config", "{bad}"), "Expected `int`, got `str`"),
        (("models", "unseal", "{tmp}", "{tmp}/plain"), "add --export to confirm"),
    ],
)
def test_cli_errors_are_one_line_never_a_traceback(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nport = "x"\n')
    if args[:2] == ("audit", "search"):
        _cli("audit", "public-key", cwd=tmp_path)  # a log to search
    done = _cli(*(a.format(bad=bad, tmp=tmp_path) for a in args), cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("Error: ")
    assert says in done.stderr
    assert "export=True" not in done.stderr  # a CLI user has a flag, not a keyword argument
    if args == ("audit", "tail"):
        assert not (tmp_path / "data").exists(), "reading a log must not create one"


def test_an_audit_key_in_the_hsm_needs_its_module_and_pin_not_a_file(tmp_path: Path) -> None:
    problems = _check(
        tmp_path,
        '[audit]\ncreate_signing_key = false\nsigning_key_provider = "pkcs11"\n'
        'signing_pkcs11_module = "/nonexistent/hsm.so"\nsigning_pkcs11_token_label = "audit"\n'
        'signing_pkcs11_pin_env = "AUDIT_PIN"\n',
    )
    assert [p.split(":", 1)[0] for p in problems] == [
        "audit.signing_pkcs11_module",
        "audit.signing_pkcs11_pin_env",
    ]


def _self_signed(folder: Path, *, start_days: int, end_days: int) -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now + dt.timedelta(days=start_days))
        .not_valid_after(now + dt.timedelta(days=end_days))
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gw.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "gw.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@pytest.mark.parametrize(
    ("start_days", "end_days", "is_warning", "says"),
    [(-30, -1, False, "certificate valid only"), (-30, 3, True, "certificate expires"), (-1, 90, None, "")],
)
def test_certificates_out_of_date_or_expiring_soon_are_named(
    tmp_path: Path, start_days: int, end_days: int, is_warning: bool | None, says: str
) -> None:
    _self_signed(tmp_path / "data" / "tls", start_days=start_days, end_days=end_days)
    problems = _check(tmp_path, '[server]\ntls = { cert_file = "tls/gw.crt", key_file = "tls/gw.key" }\n')
    if is_warning is None:
        assert problems == []
        return
    (problem,) = problems
    assert problem.is_warning is is_warning and problem.startswith(f"server.tls.cert_file: {says}")


def test_an_audit_content_key_of_the_wrong_size_is_an_error(tmp_path: Path) -> None:
    keys = tmp_path / "data" / "keys"
    keys.mkdir(parents=True)
    (keys / "audit-content.key").write_bytes(b"\n" * 33)  # an editor's newline, say
    (problem,) = _check(tmp_path, "")
    assert problem.startswith("audit.content_key_file:") and "exactly 32 bytes" in problem


def test_json_lists_the_same_problems_one_object_a_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from strongroom.cli import main

    cfg = tmp_path / "s.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[keys]\nrequire_sealed = false\n'
        '[[engine.models]]\nname = "m"\npath = "models/m"\n[engine_listener]\nhost = "0.0.0.0"\n'
    )
    args = ["config", "check", "--config", str(cfg), "--role", "engine"]
    text = CliRunner().invoke(main, args, env={})
    done = CliRunner().invoke(main, [*args, "--json"], env={})
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.exit_code == text.exit_code == 1
    assert {r["severity"] for r in rows} == {"error", "warning"}
    assert [f"{r['severity']}: {r['problem']}" for r in rows] == text.stderr.splitlines()


def test_several_workers_need_redis_and_workers_resolve_from_cores(tmp_path: Path) -> None:
    from strongroom.gateway_worker import num_workers

    problems = _check(tmp_path, "[server]\nworkers = 2\n")
    assert any(p.startswith("server.workers: 2 workers need redis_url") for p in problems)
    assert _check(tmp_path, 'redis_url = "redis://127.0.0.1:6379/0"\n[server]\nworkers = 2\n') == []
    cfg = tmp_path / "auto.toml"
    cfg.write_text('redis_url = "redis://127.0.0.1:6379/0"\n')
    assert num_workers(load_settings(cfg, environ={})) == (os.cpu_count() or 1)
    assert num_workers(load_settings(None, environ={})) == 1  # no Redis: one process
    assert num_workers(load_settings(None, environ={"STRONGROOM_SERVER__WORKERS": "3"})) == 3


def test_the_grpc_api_needs_a_port_of_its_own(tmp_path: Path) -> None:
    problems = _check(tmp_path, "[server]\nport = 9000\n[grpc]\nport = 9000\n")
    assert [p.split(":", 1)[0] for p in problems] == ["grpc.port"]
    assert _check(tmp_path, "[server]\nport = 9000\n[grpc]\nport = 9000\nenabled = false\n") == []
