"""TLS and mutual TLS on real loopback handshakes, with a throwaway PKI made here.

The in-thread server is the engine server behind the same ``Listener`` that ``serve`` and
``strongroom engine`` use; the last test runs both commands as processes: the gateway on
HTTPS, reaching an engine that requires client certificates.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from openai import OpenAI

from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest
from gateway.config import EngineTlsConfig
from gateway.grpc_api import inference_pb2 as pb
from gateway.grpc_api import inference_pb2_grpc as pb_grpc
from gateway.listener_config import ConnectionLimits, TlsConfig
from gateway.tls_context import engine_client_context
from strongroom.listener import Listener
from tests.ports import free_ports
from tests.stub_engine_server import stub_engine_on

pytestmark = pytest.mark.integration
TOKEN = "engine-token-for-tls-tests"


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1, a client certificate, and a rogue CA's client."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_ca: Path
    rogue_cert: Path
    rogue_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=usage is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> Path:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return path.with_suffix(".pem")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in ("ca", "srv", "cli", "rca", "rcli")}
    ca = _issue("test CA", keys["ca"], None, None)
    rogue_ca = _issue("rogue CA", keys["rca"], None, None)
    by_ca = (ca.subject, keys["ca"])
    _write(d / "server", _issue("engine", keys["srv"], by_ca, ExtendedKeyUsageOID.SERVER_AUTH), keys["srv"])
    _write(d / "client", _issue("gateway", keys["cli"], by_ca, ExtendedKeyUsageOID.CLIENT_AUTH), keys["cli"])
    rogue = _issue("gateway", keys["rcli"], (rogue_ca.subject, keys["rca"]), ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(d / "rogue", rogue, keys["rcli"])
    return Pki(
        ca=_write(d / "ca", ca),
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        rogue_ca=_write(d / "rogue-ca", rogue_ca),
        rogue_cert=d / "rogue.pem",
        rogue_key=d / "rogue.key",
    )


def server_tls(pki: Pki, client_cert: str = "required") -> TlsConfig:
    return TlsConfig(
        cert_file=str(pki.server_cert),
        key_file=str(pki.server_key),
        client_ca_file=None if client_cert == "none" else str(pki.ca),
        client_cert=client_cert,
    )


def engine_on(listener: Listener) -> AbstractContextManager[int]:
    """The stub engine's server on a free loopback port, in a thread, through ``listener``."""
    return stub_engine_on(listener, TOKEN)


def mtls_listener(pki: Pki, client_cert: str = "required") -> Listener:
    return Listener(server_tls(pki, client_cert), ConnectionLimits(), resolve=Path, where="engine_listener")


def info_over(port: int, tls: EngineTlsConfig) -> list[str]:
    async def go() -> list[str]:
        client = EngineClient(
            f"https://127.0.0.1:{port}", TOKEN, ssl_context=engine_client_context(tls, Path)
        )
        try:
            info = await client.info()
            request = GenerateRequest(
                request_id="r1", model="demo-chat", prompt="hi", params=SamplingParams(max_tokens=2)
            )
            async with client.generate(request) as frames:
                text = "".join([e.text async for frame in frames for e in frame])
            return [*(m.name for m in info.models), text]
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_engine_client_speaks_mutual_tls_and_the_engine_refuses_clients_without_our_cert(pki: Pki) -> None:
    with engine_on(mtls_listener(pki)) as port:
        good = EngineTlsConfig(
            ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
        )
        assert info_over(port, good) == ["demo-chat", "demo-base", " hello hello"]
        no_cert = EngineTlsConfig(ca_file=str(pki.ca))
        rogue = EngineTlsConfig(
            ca_file=str(pki.ca), cert_file=str(pki.rogue_cert), key_file=str(pki.rogue_key)
        )
        for refused in (no_cert, rogue):
            with pytest.raises(EngineUnavailableError):
                info_over(port, refused)
        # The gateway verifies the engine too: an engine whose CA it does not trust is refused.
        wrong_ca = EngineTlsConfig(
            ca_file=str(pki.rogue_ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
        )
        with pytest.raises(EngineUnavailableError):
            info_over(port, wrong_ca)


def _handshake(port: int, ctx: ssl.SSLContext) -> str:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            b"GET /engine/v1/health HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
            + TOKEN.encode()
            + b"\r\n\r\n"
        )
        head = tls.recv(4096)  # under TLS 1.3 a refused client certificate shows here, not in the handshake
        if not head:
            raise ssl.SSLError("closed")
        return f"{tls.version()} {head.split(b' ')[1].decode()}"


def _client_ctx(pki: Pki, *, with_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if with_cert:
        ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return ctx


def _tls11_client(pki: Pki) -> ssl.SSLContext:
    ctx = _client_ctx(pki)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 speaks TLS 1.1 only at security level 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    return ctx


def test_tls_1_1_is_refused_and_client_certificates_follow_the_configured_mode(pki: Pki) -> None:
    with engine_on(mtls_listener(pki)) as port:
        ctx12 = _client_ctx(pki)
        ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
        assert _handshake(port, ctx12) == "TLSv1.2 200"
        assert _handshake(port, _client_ctx(pki)) == "TLSv1.3 200"
        with pytest.raises(ssl.SSLError):
            _handshake(port, _tls11_client(pki))
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            _handshake(port, _client_ctx(pki, with_cert=False))
    # Control: the same TLS 1.1 client gets through once the listener's floor is lowered, so the
    # refusal above is the floor's doing, not this machine's OpenSSL.
    lowered = mtls_listener(pki)
    assert lowered.ssl_context is not None
    assert lowered.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        lowered.ssl_context.minimum_version = ssl.TLSVersion.TLSv1_1
    lowered.ssl_context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with engine_on(lowered) as port:
        assert _handshake(port, _tls11_client(pki)) == "TLSv1.1 200"
    with engine_on(mtls_listener(pki, "optional")) as port:
        assert _handshake(port, _client_ctx(pki, with_cert=False)) == "TLSv1.3 200"
        rogue = ssl.create_default_context(cafile=pki.ca)
        rogue.load_cert_chain(pki.rogue_cert, pki.rogue_key)
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            _handshake(port, rogue)  # optional, but a certificate that is sent must verify


def _inline(**values: str) -> str:
    return "{ " + ", ".join(f'{k} = "{v}"' for k, v in values.items()) + " }"


@contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "strongroom", *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("workers", [1, 2])
def test_served_gateway_on_https_reaches_its_engine_over_mutual_tls(
    pki: Pki, tmp_path: Path, workers: int
) -> None:
    engine_port, gateway_port, grpc_port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env |= {
        "STRONGROOM_DATA_DIR": str(tmp_path / "data"),
        "STRONGROOM_ENGINE_TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",
    }
    engine_env = env | {
        "STRONGROOM_ENGINE_LISTENER__TLS": _inline(
            cert_file=str(pki.server_cert),
            key_file=str(pki.server_key),
            client_ca_file=str(pki.ca),
            client_cert="required",
        )
    }
    gateway_env = env | {
        "STRONGROOM_SERVER__PORT": str(gateway_port),
        # The gRPC API too: TLS with the same certificate, one SO_REUSEPORT port for both workers.
        "STRONGROOM_GRPC__PORT": str(grpc_port),
        "STRONGROOM_SERVER__ENGINE_URLS": f'["https://127.0.0.1:{engine_port}"]',
        "STRONGROOM_SERVER__ENGINE_TLS": _inline(
            ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
        ),
        # The gateway's own listener: the same server certificate (valid for 127.0.0.1).
        "STRONGROOM_SERVER__TLS": _inline(cert_file=str(pki.server_cert), key_file=str(pki.server_key)),
        # Two: each worker serves TLS on its own socket (several workers need Redis for quotas).
        "STRONGROOM_SERVER__WORKERS": str(workers),
    }
    if workers > 1:
        gateway_env["STRONGROOM_REDIS_URL"] = "redis://127.0.0.1:6379/0"
        gateway_env["STRONGROOM_QUOTA__KEY_PREFIX"] = f"test-{engine_port}-{gateway_port}:quota"
    base = f"https://127.0.0.1:{gateway_port}"
    verify = ssl.create_default_context(cafile=pki.ca)
    with (
        _process(
            ["engine", "--stub", "--port", str(engine_port)], engine_env, tmp_path / "engine.log"
        ) as engine,
        _process(["serve"], gateway_env, tmp_path / "serve.log") as gateway,
    ):
        deadline = time.monotonic() + 120
        while True:
            for proc, log in ((engine, "engine.log"), (gateway, "serve.log")):
                assert proc.poll() is None, (tmp_path / log).read_text(errors="replace")
            try:
                if httpx.get(f"{base}/readyz", verify=verify, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text(errors="replace")
            time.sleep(0.2)
        token = subprocess.run(
            [sys.executable, "-m", "strongroom", "token", "--sub", "alice", "--role", "analyst"],
            env=gateway_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with httpx.Client(verify=verify) as http:
            client = OpenAI(base_url=f"{base}/v1", api_key=token, http_client=http, max_retries=0)
            reply = client.chat.completions.create(
                model="demo-chat", messages=[{"role": "user", "content": "Hello"}], max_tokens=3
            )
        assert reply.choices[0].message.content == " hello hello hello"
        with pytest.raises(httpx.HTTPError):  # nothing is served in clear on the TLS port
            httpx.get(f"http://127.0.0.1:{gateway_port}/healthz", timeout=2)
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
        metadata = (("authorization", f"Bearer {token}"),)
        request = pb.ChatCompletionRequest(
            model="demo-chat", messages=[pb.ChatMessage(role="user", content="Hello")], max_tokens=3
        )
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            answer = pb_grpc.InferenceStub(channel).Chat(request, metadata=metadata, timeout=30)
        assert answer.choices[0].message.content == " hello hello hello"
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel, pytest.raises(grpc.RpcError):
            pb_grpc.InferenceStub(channel).Chat(request, metadata=metadata, timeout=5)
