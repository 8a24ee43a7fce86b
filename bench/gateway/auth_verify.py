"""Latency of ``TokenVerifier.verify`` for a dev-issuer (EdDSA) and an RS256 token, SQLite revocation on.

Run: ``.venv/bin/python -m bench.gateway.auth_verify [--n 2000]``; prints p50/p99 in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.auth import AuthConfig, DevIssuer, IssuerConfig, TokenVerifier


async def measure(verifier: TokenVerifier, header: str, n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await verifier.verify(header)
        samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * len(samples))]


async def main(n: int) -> None:
    data_dir = Path(tempfile.mkdtemp())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (data_dir / "idp.pem").write_bytes(
        rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    idp = IssuerConfig(issuer="https://idp.bench", audiences=("strongroom",), key_files=("idp.pem",))
    verifier = TokenVerifier.create(AuthConfig(issuers=(idp,)), data_dir, redis=None)
    now = int(time.time())
    rs256 = jwt.encode(
        {
            "iss": "https://idp.bench",
            "aud": "strongroom",
            "sub": "a",
            "iat": now,
            "exp": now + 600,
            "jti": "j",
        },
        rsa_key,
        algorithm="RS256",
    )
    tokens = {
        "EdDSA (dev issuer)": DevIssuer.load_or_create(data_dir).mint("alice", ["analyst"]),
        "RS256": rs256,
    }
    results = {}
    for name, token in tokens.items():
        p50, p99 = await measure(verifier, f"Bearer {token}", n)
        results[name] = {"p50_us": round(p50, 1), "p99_us": round(p99, 1)}
    await verifier.aclose()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    asyncio.run(main(parser.parse_args().n))
