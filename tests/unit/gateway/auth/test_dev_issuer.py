from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import FakeClock

import stat
from pathlib import Path

import jwt
import pytest

from gateway.auth import (
    AuthConfig,
    AuthConfigError,
    AuthenticationError,
    DevIssuer,
    IssuerConfig,
    TokenVerifier,
)

pytestmark = pytest.mark.anyio


def test_creates_private_key_0600_and_reloads_the_same(tmp_path: Path) -> None:
    first = DevIssuer.load_or_create(tmp_path)
    key_path = tmp_path / "keys" / "dev-signing-key.pem"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert (tmp_path / "keys" / "dev-signing-key.pub.pem").read_bytes().startswith(b"-----BEGIN PUBLIC KEY")
    assert DevIssuer.load_or_create(tmp_path).kid == first.kid
    assert "redacted" in repr(first) and "PRIVATE" not in repr(first)


def test_refuses_a_key_readable_by_others(tmp_path: Path) -> None:
    DevIssuer.load_or_create(tmp_path)
    (tmp_path / "keys" / "dev-signing-key.pem").chmod(0o644)
    with pytest.raises(AuthConfigError, match="readable by others"):
        DevIssuer.load_or_create(tmp_path)


def test_mint_sets_registered_claims(tmp_path: Path, clock: FakeClock) -> None:
    issuer = DevIssuer.load_or_create(tmp_path, clock=clock)
    token = issuer.mint("alice", ["analyst", "admin"], ttl_s=120, tenant="retail", client_id="cli")
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "EdDSA" and header["kid"] == issuer.kid
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload["iss"] == "strongroom-dev" and payload["aud"] == "strongroom"
    assert payload["iat"] == int(clock.now) and payload["exp"] == int(clock.now) + 120
    assert payload["jti"] and payload["roles"] == ["analyst", "admin"]
    assert payload["tenant"] == "retail" and payload["client_id"] == "cli"
    with pytest.raises(ValueError, match="ttl_s"):
        issuer.mint("alice", [], ttl_s=0)


async def test_verifier_trusts_dev_issuer_by_default(tmp_path: Path, clock: FakeClock) -> None:
    token = DevIssuer.load_or_create(tmp_path, clock=clock).mint("alice", ["analyst"], tenant="retail")
    verifier = TokenVerifier.create(AuthConfig(), tmp_path, redis=None, clock=clock)
    try:
        principal = await verifier.verify(f"Bearer {token}")
    finally:
        await verifier.aclose()
    assert principal.subject == "alice" and principal.roles == ("analyst",)
    assert principal.issuer == "strongroom-dev" and principal.tenant == "retail"
    assert principal.expires_at == int(clock.now) + 3600 and principal.token_id


async def test_dev_tokens_rejected_when_dev_issuer_is_off(tmp_path: Path, clock: FakeClock) -> None:
    token = DevIssuer.load_or_create(tmp_path, clock=clock).mint("alice", ["admin"])
    verifier = TokenVerifier.create(AuthConfig(dev_issuer=False), tmp_path, redis=None, clock=clock)
    try:
        with pytest.raises(AuthenticationError) as caught:
            await verifier.verify(f"Bearer {token}")
    finally:
        await verifier.aclose()
    assert caught.value.reason == "untrusted issuer" and str(caught.value) == "Invalid token"


def test_dev_issuer_name_is_reserved(tmp_path: Path) -> None:
    impostor = IssuerConfig(issuer="strongroom-dev", audiences=("strongroom",), jwks_url="https://evil/jwks")
    with pytest.raises(AuthConfigError, match="reserved"):
        TokenVerifier.create(AuthConfig(issuers=(impostor,)), tmp_path, redis=None)
