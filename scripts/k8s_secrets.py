#!/usr/bin/env python3
"""Create the secret material of a Kubernetes install: one folder per Secret, one file per key.

    STRONGROOM_REDIS_URL=rediss://:pw@redis.db:6380/0 \\
    STRONGROOM_AUDIT__POSTGRES_DSN='host=pg.db dbname=strongroom user=strongroom_audit password=...' \\
    STRONGROOM_AUDIT__WITNESS_POSTGRES_DSN='host=pg.db dbname=strongroom user=strongroom_witness password=...' \\
    STRONGROOM_ACCESS__POSTGRES_DSN='host=pg.db dbname=strongroom user=strongroom_policy password=...' \\
    python scripts/k8s_secrets.py --out /secure/strongroom-secrets --namespace strongroom --engines 2
    kubectl -n strongroom create secret generic strongroom-gateway --from-file=/secure/strongroom-secrets/gateway
    kubectl -n strongroom create secret generic strongroom-engine --from-file=/secure/strongroom-secrets/engine

Run it on an offline admin host with strongroom installed (it creates the master key and audit
signing key with strongroom's own code), keep the folder offline (it holds every private key),
and pin the printed audit key fingerprint in your records. It makes a private CA for the
gateway <-> engine mutual TLS and the gateways' serving certificate (the ingress talks HTTPS to
them); the ingress's public certificate is the site's own (values: ingress.tlsSecretName).
DSNs and the Redis URL are read from the environment, never from the command line (ps shows it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_ENV = {
    "redis-url": "STRONGROOM_REDIS_URL",
    "audit-postgres-dsn": "STRONGROOM_AUDIT__POSTGRES_DSN",
    "audit-witness-dsn": "STRONGROOM_AUDIT__WITNESS_POSTGRES_DSN",
    "access-postgres-dsn": "STRONGROOM_ACCESS__POSTGRES_DSN",
}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    dns: list[str] = (),  # type: ignore[assignment]
    usage: list[x509.ObjectIdentifier] = (),  # type: ignore[assignment]
    days: int,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False
        )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(folder: Path, name: str, data: bytes) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def create(out: Path, *, release: str, namespace: str, cluster_domain: str, engines: int, days: int) -> str:
    """Write ``out/gateway`` and ``out/engine``; returns the audit public key fingerprint."""
    from audit.signer import CheckpointSigner
    from keys import KeyFileProvider

    missing = [env for env in _ENV.values() if not os.environ.get(env)]
    if missing:
        raise SystemExit(f"set {', '.join('$' + m for m in missing)} (the external services' addresses)")
    if out.exists():
        raise SystemExit(f"{out} exists already; refusing to overwrite secret material")
    gateway, engine = out / "gateway", out / "engine"
    ca_key = _key()
    ca = _cert(f"{release} internal CA", ca_key, None, days=days)
    svc = f"{namespace}.svc.{cluster_domain}"
    gw_host = f"{release}-gateway"
    gw_key = _key()
    gw_cert = _cert(
        gw_host,
        gw_key,
        (ca, ca_key),
        dns=[gw_host, f"{gw_host}.{namespace}", f"{gw_host}.{svc}"],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        days=days,
    )
    headless = f"{release}-engine.{svc}"
    engine_key = _key()
    engine_cert = _cert(
        f"{release}-engine",
        engine_key,
        (ca, ca_key),
        dns=[f"*.{headless}", *(f"{release}-engine-{i}.{headless}" for i in range(engines))],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        days=days,
    )
    client_key = _key()
    client_cert = _cert(
        f"{release}-gateway-client",
        client_key,
        (ca, ca_key),
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
        days=days,
    )
    token = secrets.token_urlsafe(32).encode()
    files = {
        "tls.crt": _pem(gw_cert),
        "tls.key": _pem_key(gw_key),
        "ca.crt": _pem(ca),
        "engine-client.crt": _pem(client_cert),
        "engine-client.key": _pem_key(client_key),
        "audit-content-hmac.key": secrets.token_bytes(32),
        "audit-content.key": secrets.token_bytes(32),
        "engine-token": token,
        "metrics-token": secrets.token_urlsafe(32).encode(),
    }
    files |= {name: os.environ[env].encode() for name, env in _ENV.items()}
    for name, data in files.items():
        _write(gateway, name, data)
    signer = CheckpointSigner.load(gateway / "audit-signing-key.pem", create=True)
    _write(gateway, "audit-public-key-fingerprint", signer.verifier.fingerprint.encode())
    for name, data in {
        "tls.crt": _pem(engine_cert),
        "tls.key": _pem_key(engine_key),
        "ca.crt": _pem(ca),
        "engine-token": token,
    }.items():
        _write(engine, name, data)
    KeyFileProvider.create(engine / "master.key")
    return signer.verifier.fingerprint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="new folder for the material (kept offline)")
    parser.add_argument("--release", default="strongroom", help="Helm release name (default strongroom)")
    parser.add_argument("--namespace", default="strongroom")
    parser.add_argument("--cluster-domain", default="cluster.local")
    parser.add_argument("--engines", type=int, default=2, help="engine replicas the certificate names")
    parser.add_argument("--days", type=int, default=397, help="certificate lifetime")
    args = parser.parse_args()
    fingerprint = create(
        args.out,
        release=args.release,
        namespace=args.namespace,
        cluster_domain=args.cluster_domain,
        engines=args.engines,
        days=args.days,
    )
    print(f"wrote {args.out}/gateway and {args.out}/engine; audit key fingerprint {fingerprint}")
    for name in ("gateway", "engine"):
        print(
            f"kubectl -n {args.namespace} create secret generic {args.release}-{name} "
            f"--from-file={args.out}/{name}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
