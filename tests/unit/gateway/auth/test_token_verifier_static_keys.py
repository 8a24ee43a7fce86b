"""TokenVerifier over static key files (PEM, JWK, JWKS) and an HMAC issuer; claims mapping."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import FakeClock

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from gateway.auth import (
    AuthConfig,
    AuthConfigError,
    AuthenticationError,
    IssuerConfig,
    TokenVerifier,
    token_verifier,
)
from gateway.auth.verification_key import VerificationKey

pytestmark = pytest.mark.anyio
SECRET = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t!"


ISSUER = "https://idp.bank.test/realms/main"


def write_pem(path: Path, key: Any) -> str:
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(path)


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


async def verify(verifier: TokenVerifier, token: str) -> Any:
    return await verifier.verify(f"Bearer {token}")


async def rejected(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(AuthenticationError) as caught:
        await verify(verifier, token)
    assert str(caught.value) == "Invalid token"
    return caught.value.reason


@pytest.fixture
async def pem_verifier(tmp_path: Path, clock: FakeClock, ec_key: Any) -> AsyncIterator[TokenVerifier]:
    issuer = IssuerConfig(
        issuer=ISSUER,
        audiences=("strongroom",),
        key_files=(write_pem(tmp_path / "idp.pem", ec_key),),
        roles_claim="realm_access.roles",
        role_mapping={"bank-analysts": "analyst", "bank-admins": "admin"},
        tenant_claim="org.unit",
    )
    cfg = AuthConfig(issuers=(issuer,), dev_issuer=False)
    verifier = TokenVerifier.create(cfg, tmp_path, redis=None, clock=clock)
    yield verifier
    await verifier.aclose()


async def test_pem_key_with_thumbprint_kid_and_without_kid(
    pem_verifier: TokenVerifier, clock: FakeClock, ec_key: Any
) -> None:
    kid = VerificationKey.from_public_key(ec_key.public_key()).kid
    body = claims(
        clock, realm_access={"roles": ["bank-analysts", "everyone"]}, org={"unit": "retail"}, azp="app"
    )
    principal = await verify(pem_verifier, jwt.encode(body, ec_key, algorithm="ES256", headers={"kid": kid}))
    assert principal.roles == ("analyst",)
    assert principal.tenant == "retail" and principal.client_id == "app"
    assert (await verify(pem_verifier, jwt.encode(body, ec_key, algorithm="ES256"))).subject == "alice"


async def test_kid_is_only_a_lookup_key(pem_verifier: TokenVerifier, clock: FakeClock, ec_key: Any) -> None:
    for kid in ("../../../etc/passwd", "http://evil.test/key.pem", "idp.pem", "x" * 300):
        token = jwt.encode(claims(clock), ec_key, algorithm="ES256", headers={"kid": kid})
        assert await rejected(pem_verifier, token) in {"unknown kid", "malformed kid"}


async def test_unmapped_groups_grant_nothing(
    pem_verifier: TokenVerifier, clock: FakeClock, ec_key: Any
) -> None:
    body = claims(clock, realm_access={"roles": ["admin", "root"]})
    assert (await verify(pem_verifier, jwt.encode(body, ec_key, algorithm="ES256"))).roles == ()


async def test_key_of_another_type_does_not_verify(
    pem_verifier: TokenVerifier, clock: FakeClock, ed_key: Any
) -> None:
    token = jwt.encode(claims(clock), ed_key, algorithm="EdDSA")
    assert await rejected(pem_verifier, token) == "token has no kid and not exactly one issuer key fits"


async def test_jwk_and_jwks_files(tmp_path: Path, clock: FakeClock, rsa_key: Any, ed_key: Any) -> None:
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key())) | {"kid": "r1"}
    ed_jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(ed_key.public_key())) | {
        "kid": "e1",
        "alg": "EdDSA",
    }
    (tmp_path / "rsa.jwk").write_text(json.dumps(rsa_jwk))
    (tmp_path / "set.jwks").write_text(json.dumps({"keys": [ed_jwk]}))
    issuer = IssuerConfig(
        issuer=ISSUER, audiences=("strongroom",), key_files=("rsa.jwk", "set.jwks"), roles_claim="groups"
    )
    verifier = TokenVerifier.create(
        AuthConfig(issuers=(issuer,), dev_issuer=False), tmp_path, redis=None, clock=clock
    )
    try:
        body = claims(clock, groups="analyst")
        for key, alg, kid in ((rsa_key, "RS256", "r1"), (rsa_key, "PS256", "r1"), (ed_key, "EdDSA", "e1")):
            principal = await verify(verifier, jwt.encode(body, key, algorithm=alg, headers={"kid": kid}))
            assert principal.roles == ("analyst",)
        assert await rejected(
            verifier, jwt.encode(body, rsa_key, algorithm="RS256", headers={"kid": "e1"})
        ) == ("key does not fit the token's algorithm")
    finally:
        await verifier.aclose()


def test_key_files_must_hold_public_asymmetric_keys(tmp_path: Path, rsa_key: Any) -> None:
    private_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key))
    (tmp_path / "private.jwk").write_text(json.dumps(private_jwk))
    (tmp_path / "oct.jwk").write_text(json.dumps({"kty": "oct", "k": "c2VjcmV0"}))
    (tmp_path / "junk.pem").write_text("not a key")
    for name, message in (
        ("private.jwk", "private"),
        ("oct.jwk", "kty"),
        ("junk.pem", "PEM"),
        ("nope", "cannot load key file"),
    ):
        issuer = IssuerConfig(issuer=ISSUER, audiences=("strongroom",), key_files=(name,))
        with pytest.raises(AuthConfigError, match=message):
            TokenVerifier.create(AuthConfig(issuers=(issuer,), dev_issuer=False), tmp_path, redis=None)


@pytest.fixture
async def hmac_verifier(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[TokenVerifier]:
    monkeypatch.setenv("IDP_HMAC_SECRET", SECRET)
    issuer = IssuerConfig(
        issuer="legacy-idp",
        audiences=("strongroom",),
        algorithms=("HS256",),
        hmac_secret_env="IDP_HMAC_SECRET",
        roles_claim="https://bank.test/roles",
    )
    cfg = AuthConfig(issuers=(issuer,), dev_issuer=False, revocation=False)
    verifier = TokenVerifier.create(cfg, tmp_path, redis=None, clock=clock)
    yield verifier
    await verifier.aclose()


async def test_hmac_issuer_accepts_its_secret_only(hmac_verifier: TokenVerifier, clock: FakeClock) -> None:
    body = claims(clock, iss="legacy-idp", jti=None, **{"https://bank.test/roles": ["teller"]})
    assert (await verify(hmac_verifier, jwt.encode(body, SECRET, algorithm="HS256"))).roles == ("teller",)
    assert await rejected(hmac_verifier, jwt.encode(body, SECRET + "x", algorithm="HS256")) == "bad signature"
    assert await rejected(hmac_verifier, jwt.encode(body, SECRET * 2, algorithm="HS512")) == (
        "algorithm not allowed for issuer"
    )


def test_hmac_secret_must_be_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHORT_SECRET", "short")
    issuer = IssuerConfig(issuer="x", audiences=("a",), algorithms=("HS256",), hmac_secret_env="SHORT_SECRET")
    with pytest.raises(AuthConfigError, match="32 bytes"):
        TokenVerifier.create(AuthConfig(issuers=(issuer,), dev_issuer=False), tmp_path, redis=None)
    monkeypatch.delenv("SHORT_SECRET")
    with pytest.raises(AuthConfigError, match="SHORT_SECRET"):
        TokenVerifier.create(AuthConfig(issuers=(issuer,), dev_issuer=False), tmp_path, redis=None)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Token abc",
        "Bearer a.b",
        "Bearer a.b.c.d",
        "Bearer a..c",
    ],
)
async def test_malformed_authorization_headers(pem_verifier: TokenVerifier, header: str | None) -> None:
    with pytest.raises(AuthenticationError):
        await pem_verifier.verify(header)


async def test_a_token_seen_before_is_not_decoded_again_and_still_checked(
    pem_verifier: TokenVerifier, clock: FakeClock, ec_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    decode = token_verifier._decode_unverified

    def counting(token: str) -> Any:
        decoded.append(token)
        return decode(token)

    monkeypatch.setattr(token_verifier, "_decode_unverified", counting)
    token = jwt.encode(claims(clock, exp=int(clock.now) + 60), ec_key, algorithm="ES256")
    for _ in range(3):
        assert (await verify(pem_verifier, token)).subject == "alice"
    assert decoded == [token]
    clock.advance(61 + pem_verifier._cfg.leeway_s)  # the claims are still checked on every request
    assert await rejected(pem_verifier, token) == "expired"
