"""TokenVerifier against a JWKS served by a real HTTP server on loopback: the attack catalogue,
key rotation without restart, and JWKS outages (cache, then fail closed). Time is injected."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.auth import AuthConfig, AuthenticationError, IssuerConfig, RevocationList, TokenVerifier

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ISSUER = "https://idp.bank.test/realms/main"
T0 = 1_800_000_000.0


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class JwksServer:
    """Serves ``document`` as JSON at /jwks; ``status`` != 200 simulates an IdP outage."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"keys": []}
        self.status = 200
        self.num_requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.num_requests += 1
                body = json.dumps(server.document).encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/jwks"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def public_jwk(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = jwt.algorithms.OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, **extra}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def jwks(rsa_key: Any) -> Iterator[JwksServer]:
    server = JwksServer()
    server.document = {
        "keys": [public_jwk(rsa_key, "rsa-1"), {"kty": "oct", "k": b64url(b"x" * 32), "kid": "sym"}]
    }
    yield server
    server.stop()


@pytest.fixture
async def verifier(jwks: JwksServer, clock: FakeClock, tmp_path: Path) -> AsyncIterator[TokenVerifier]:
    issuer = IssuerConfig(issuer=ISSUER, audiences=("strongroom", "strongroom-batch"), jwks_url=jwks.url)
    cfg = AuthConfig(issuers=(issuer,), dev_issuer=False)
    token_verifier = TokenVerifier.create(cfg, tmp_path, redis=None, clock=clock)
    yield token_verifier
    await token_verifier.aclose()


def claims(clock: FakeClock, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": "strongroom",
        "sub": "alice",
        "iat": int(clock.now),
        "exp": int(clock.now) + 600,
        "jti": uuid.uuid4().hex,
        "roles": ["analyst"],
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def rs256(key: Any, body: dict[str, Any], **headers: Any) -> str:
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "rsa-1", **headers})


def hmac_token(secret: bytes, body: dict[str, Any], kid: str = "rsa-1") -> str:
    signing_input = (
        f"{b64url(json.dumps({'alg': 'HS256', 'kid': kid}).encode())}.{b64url(json.dumps(body).encode())}"
    )
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


async def reason_for(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(AuthenticationError) as caught:
        await verifier.verify(f"Bearer {token}")
    assert str(caught.value) == "Invalid token" and caught.value.message == "Invalid token"
    assert caught.value.status_code == 401
    return caught.value.reason


async def test_valid_token_is_accepted(verifier: TokenVerifier, clock: FakeClock, rsa_key: Any) -> None:
    principal = await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock, azp='web'))}")
    assert (principal.subject, principal.roles, principal.issuer) == ("alice", ("analyst",), ISSUER)
    assert principal.client_id == "web"
    body = claims(clock, aud=["other", "strongroom-batch"], iat=int(clock.now) - 600, exp=int(clock.now) - 29)
    assert (await verifier.verify(f"bearer {rs256(rsa_key, body)}")).subject == "alice"


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
async def test_alg_none_rejected(verifier: TokenVerifier, clock: FakeClock, alg: str) -> None:
    signing_input = f"{b64url(json.dumps({'alg': alg, 'kid': 'rsa-1'}).encode())}.{b64url(json.dumps(claims(clock)).encode())}"
    assert await reason_for(verifier, f"{signing_input}.{b64url(b'anything')}") == "alg none"
    await reason_for(verifier, f"{signing_input}.")


async def test_hs256_signed_with_the_rsa_public_key_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any
) -> None:
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    der = rsa_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for secret in (pem, der):
        assert (
            await reason_for(verifier, hmac_token(secret, claims(clock)))
            == "algorithm not allowed for issuer"
        )


async def test_public_jwk_as_hmac_secret_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any
) -> None:
    jwk = public_jwk(rsa_key, "rsa-1")
    for secret in (json.dumps(jwk).encode(), jwk["n"].encode(), b"x" * 32):
        for kid in ("rsa-1", "sym"):
            assert await reason_for(verifier, hmac_token(secret, claims(clock), kid)) == (
                "algorithm not allowed for issuer"
            )


async def test_symmetric_jwk_in_the_jwks_is_never_a_key(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any
) -> None:
    assert await reason_for(verifier, rs256(rsa_key, claims(clock), kid="sym")) == "unknown kid"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": int(T0) - 31}, "expired"),
        ({"exp": int(T0) - 3600, "iat": int(T0) - 7200}, "expired"),
        ({"nbf": int(T0) + 31}, "not yet valid (nbf)"),
        ({"iat": int(T0) + 31, "exp": int(T0) + 600}, "iat in the future"),
        ({"exp": int(T0) + 86401}, "lifetime exceeds max_lifetime_s"),
        ({"exp": int(T0) - 10, "iat": int(T0) - 5}, "exp not after iat"),
        ({"exp": "1900000000"}, "exp is not a finite number"),
        ({"exp": True}, "exp is not a finite number"),
        ({"aud": "strongroom-evil"}, "audience not accepted"),
        ({"aud": ["other"]}, "audience not accepted"),
        ({"aud": "Strongroom"}, "audience not accepted"),
        ({"aud": [1]}, "aud is not a string or a list of strings"),
        ({"sub": ""}, "missing claim sub"),
        ({"sub": 42}, "sub is not a non-empty string"),
    ],
)
async def test_bad_claims_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, overrides: dict[str, Any], reason: str
) -> None:
    body = claims(clock, **overrides)
    if body["sub"] == "":
        body.pop("sub")
    assert await reason_for(verifier, rs256(rsa_key, body)) == reason


async def test_non_finite_times_rejected(verifier: TokenVerifier, clock: FakeClock, rsa_key: Any) -> None:
    for value in ("NaN", "Infinity"):
        payload = json.dumps(claims(clock)).replace(f'"exp": {int(clock.now) + 600}', f'"exp": {value}')
        token = jwt.PyJWS().encode(payload.encode(), rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})
        assert await reason_for(verifier, token) == "exp is not a finite number"


@pytest.mark.parametrize(
    "iss",
    [
        "https://idp.bank.test/realms/mai",
        "https://idp.bank.test/realms/main/",
        "https://idp.bank.test/realms/main.evil.test",
        "https://evil.test/https://idp.bank.test/realms/main",
        "idp.bank.test",
        "HTTPS://IDP.BANK.TEST/REALMS/MAIN",
        "",
    ],
)
async def test_wrong_issuer_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, iss: str
) -> None:
    assert await reason_for(verifier, rs256(rsa_key, claims(clock, iss=iss))) == "untrusted issuer"


@pytest.mark.parametrize("claim", ["exp", "iat", "sub", "iss", "aud", "jti"])
async def test_each_required_claim_missing_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, claim: str
) -> None:
    body = claims(clock)
    del body[claim]
    expected = "untrusted issuer" if claim == "iss" else f"missing claim {claim}"
    assert await reason_for(verifier, rs256(rsa_key, body)) == expected


async def test_tampered_payload_and_signature_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any
) -> None:
    header, _, signature = rs256(rsa_key, claims(clock)).split(".")
    forged = b64url(json.dumps(claims(clock, roles=["admin"])).encode())
    assert await reason_for(verifier, f"{header}.{forged}.{signature}") == "bad signature"
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    assert await reason_for(verifier, f"{header}.{forged}.{flipped}") == "bad signature"
    token = rs256(rsa_key, claims(clock))
    header, payload, signature = token.split(".")
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    assert await reason_for(verifier, f"{header}.{payload}.{flipped}") == "bad signature"


@pytest.mark.parametrize(
    "header",
    [
        {"jku": "http://evil.test/jwks"},
        {"x5u": "http://evil.test/cert.pem"},
        {"x5c": ["MIIB..."]},
        {"jwk": {"kty": "RSA", "n": "x", "e": "AQAB"}},
        {"crit": ["exp"]},
        {"crit": ["b64"], "b64": True},
    ],
)
async def test_dangerous_headers_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, header: dict[str, Any]
) -> None:
    assert (await reason_for(verifier, rs256(rsa_key, claims(clock), **header))).startswith(
        "forbidden header"
    )


async def test_wrong_key_type_and_unlisted_alg_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, ec_key: Any
) -> None:
    token = jwt.encode(claims(clock), ec_key, algorithm="ES256", headers={"kid": "rsa-1"})
    assert await reason_for(verifier, token) == "key does not fit the token's algorithm"
    token = jwt.encode(claims(clock), rsa_key, algorithm="RS512", headers={"kid": "rsa-1"})
    assert await reason_for(verifier, token) == "algorithm not allowed for issuer"


async def test_oversized_token_rejected(verifier: TokenVerifier, clock: FakeClock, rsa_key: Any) -> None:
    token = rs256(rsa_key, claims(clock, padding="x" * 9000))
    assert await reason_for(verifier, token) == "token too large"


async def test_revoked_jti_and_subject_rejected(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, tmp_path: Path
) -> None:
    admin = RevocationList.open(AuthConfig(), tmp_path, redis=None, clock=clock)
    body = claims(clock)
    await admin.revoke_token(body["jti"], expires_at=body["exp"])
    assert await reason_for(verifier, rs256(rsa_key, body)) == "token revoked (jti)"
    await admin.revoke_subject("bob", before=clock.now)
    bob = rs256(rsa_key, claims(clock, sub="bob"))
    assert await reason_for(verifier, bob) == "subject revoked before this token's iat"
    clock.advance(1)
    assert (await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock, sub='bob'))}")).subject == "bob"
    await admin.aclose()


async def test_unknown_kid_refetches_at_most_once_per_cooldown(
    verifier: TokenVerifier, jwks: JwksServer, clock: FakeClock, rsa_key: Any
) -> None:
    await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")
    assert jwks.num_requests == 1
    for _ in range(5):
        assert (
            await reason_for(verifier, rs256(rsa_key, claims(clock), kid=uuid.uuid4().hex)) == "unknown kid"
        )
    assert jwks.num_requests == 1
    clock.advance(30)
    assert await reason_for(verifier, rs256(rsa_key, claims(clock), kid="nope")) == "unknown kid"
    assert jwks.num_requests == 2


async def test_new_key_in_jwks_accepted_without_restart(
    verifier: TokenVerifier, jwks: JwksServer, clock: FakeClock, rsa_key: Any, ec_key: Any
) -> None:
    await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")
    rotated = jwt.encode(claims(clock), ec_key, algorithm="ES256", headers={"kid": "ec-2"})
    jwks.document = {"keys": [public_jwk(rsa_key, "rsa-1"), public_jwk(ec_key, "ec-2")]}
    clock.advance(31)
    assert (await verifier.verify(f"Bearer {rotated}")).subject == "alice"
    jwks.document = {"keys": [public_jwk(ec_key, "ec-2")]}
    clock.advance(301)
    assert await reason_for(verifier, rs256(rsa_key, claims(clock))) == "unknown kid"


@pytest.mark.parametrize("outage", ["http-503", "malformed", "server-gone"])
async def test_jwks_outage_uses_cache_then_fails_closed(
    verifier: TokenVerifier, jwks: JwksServer, clock: FakeClock, rsa_key: Any, outage: str
) -> None:
    await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")
    if outage == "http-503":
        jwks.status = 503
    elif outage == "malformed":
        jwks.document = {"error": "maintenance"}
    else:
        jwks.stop()
    clock.advance(301)
    assert (await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")).subject == "alice"
    clock.advance(3600 - 301)
    assert (await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")).subject == "alice"
    clock.advance(2)
    assert await reason_for(verifier, rs256(rsa_key, claims(clock))) == "JWKS unavailable"
    if outage == "http-503":
        jwks.status = 200
        clock.advance(30)
        assert (await verifier.verify(f"Bearer {rs256(rsa_key, claims(clock))}")).subject == "alice"


async def test_jwks_never_reachable_fails_closed(clock: FakeClock, tmp_path: Path, rsa_key: Any) -> None:
    server = JwksServer()
    server.stop()
    issuer = IssuerConfig(issuer=ISSUER, audiences=("strongroom",), jwks_url=server.url)
    token_verifier = TokenVerifier.create(
        AuthConfig(issuers=(issuer,), dev_issuer=False), tmp_path, redis=None, clock=clock
    )
    try:
        assert await reason_for(token_verifier, rs256(rsa_key, claims(clock))) == "JWKS unavailable"
        assert await reason_for(token_verifier, jwt.encode(claims(clock), rsa_key, algorithm="RS256")) == (
            "JWKS unavailable"
        )
    finally:
        await token_verifier.aclose()


async def test_a_token_seen_before_is_checked_again_in_full_except_its_signature(
    verifier: TokenVerifier, clock: FakeClock, rsa_key: Any, tmp_path: Path
) -> None:
    body = claims(clock)
    token = rs256(rsa_key, body)
    assert (await verifier.verify(f"Bearer {token}")).subject == "alice"
    assert (await verifier.verify(f"Bearer {token}")).subject == "alice"
    # The same claims under a forged signature are other bytes: never served from what was verified.
    head, payload, signature = token.split(".")
    forged = f"{head}.{payload}.{signature[:-4]}AAAA"
    assert await reason_for(verifier, forged) == "bad signature"
    admin = RevocationList.open(AuthConfig(), tmp_path, redis=None, clock=clock)
    await admin.revoke_token(body["jti"], expires_at=body["exp"])
    assert await reason_for(verifier, token) == "token revoked (jti)"
    await admin.aclose()
    later = rs256(rsa_key, claims(clock, jti=uuid.uuid4().hex))
    assert (await verifier.verify(f"Bearer {later}")).subject == "alice"
    clock.advance(600 + 30)
    assert await reason_for(verifier, later) == "expired"


async def test_a_token_seen_before_fails_once_its_key_leaves_the_jwks(
    verifier: TokenVerifier, jwks: JwksServer, clock: FakeClock, rsa_key: Any, ec_key: Any
) -> None:
    body = claims(clock, exp=int(clock.now) + 3000)
    token = rs256(rsa_key, body)
    assert (await verifier.verify(f"Bearer {token}")).subject == "alice"
    jwks.document = {"keys": [public_jwk(ec_key, "ec-2")]}
    clock.advance(301)
    assert await reason_for(verifier, token) == "unknown kid"
    # Put back under the same kid: a freshly fetched key object, so the signature is checked anew.
    jwks.document = {"keys": [public_jwk(rsa_key, "rsa-1")]}
    clock.advance(301)
    assert (await verifier.verify(f"Bearer {token}")).subject == "alice"
