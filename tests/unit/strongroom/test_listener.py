"""Start-up refusals of an exposed listener with an unsafe setting, through the real commands."""

from __future__ import annotations

import socket
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from gateway.auth.config import AuthConfig
from gateway.errors import ConfigError
from gateway.listener_config import TlsConfig
from strongroom.cli import main
from strongroom.config import Settings
from strongroom.listener import check_engine_exposure, check_gateway_exposure, check_port_free

MTLS = TlsConfig(cert_file="c.pem", key_file="k.pem", client_ca_file="ca.pem", client_cert="required")


def settings(host: str, *, dev_issuer: bool) -> Settings:
    s = Settings()
    return msgspec.structs.replace(
        s,
        server=msgspec.structs.replace(s.server, host=host),
        auth=AuthConfig(dev_issuer=dev_issuer),
    )


def test_the_dev_issuer_is_refused_off_loopback_only() -> None:
    check_gateway_exposure(settings("127.0.0.1", dev_issuer=True))  # make serve's default
    check_gateway_exposure(settings("0.0.0.0", dev_issuer=False))
    for host in ("0.0.0.0", "::", "10.0.0.7", "gateway.example"):
        with pytest.raises(ConfigError, match="dev token issuer is on"):
            check_gateway_exposure(settings(host, dev_issuer=True))


def test_an_engine_off_loopback_needs_mutual_tls() -> None:
    check_engine_exposure("127.0.0.1", TlsConfig())
    check_engine_exposure("0.0.0.0", MTLS)
    optional = TlsConfig(cert_file="c.pem", key_file="k.pem", client_ca_file="ca.pem", client_cert="optional")
    for tls in (TlsConfig(), TlsConfig(cert_file="c.pem", key_file="k.pem"), optional):
        with pytest.raises(ConfigError, match="without mutual TLS"):
            check_engine_exposure("0.0.0.0", tls)


def test_the_commands_refuse_before_binding_anything(tmp_path: Path) -> None:
    env = {"STRONGROOM_DATA_DIR": str(tmp_path / "data"), "STRONGROOM_ENGINE_TOKEN": "t" * 32}
    runner = CliRunner(env=env)
    served = runner.invoke(main, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert served.exit_code == 1 and "dev token issuer is on" in served.output, served.output
    engine = runner.invoke(main, ["engine", "--host", "0.0.0.0", "--port", "1", "--stub"])
    assert engine.exit_code == 1 and "without mutual TLS" in engine.output, engine.output
    assert not (tmp_path / "data").exists()  # refused before anything was created
    # The same engine on a public address with mutual TLS configured gets past the check and
    # fails on the missing files instead, naming the key.
    env["STRONGROOM_ENGINE_LISTENER__TLS"] = (
        '{cert_file = "nope.pem", key_file = "nope.key", client_ca_file = "ca.pem", client_cert = "required"}'
    )
    engine = CliRunner(env=env).invoke(main, ["engine", "--host", "0.0.0.0", "--port", "1", "--stub"])
    assert engine.exit_code == 1 and "engine_listener.tls.cert_file" in engine.output, engine.output


def test_a_taken_port_is_refused_with_what_it_was_for() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"the gRPC API on 127.0.0.1:{port}: "):
            check_port_free("127.0.0.1", port, "the gRPC API")
    check_port_free("127.0.0.1", port, "the gRPC API")  # free again
