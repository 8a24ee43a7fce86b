"""Public keys that tokens are verified with, and which algorithm each one may serve.

Only asymmetric public keys are ever built here: a JWK of type ``oct``, or one carrying private
material, is refused, so no key from a JWKS or a key file can be turned into an HMAC secret.
A key is found by its ``kid`` (from the JWK) or, when it has none, by its RFC 7638 thumbprint.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

__all__ = ["PublicKey", "VerificationKey", "load_key_file"]

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey

_MIN_RSA_BITS = 2048
_EC_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
_THUMBPRINT_MEMBERS = {"RSA": ("e", "kty", "n"), "EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x")}
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


class KeyFormatError(ValueError):
    """A JWK or PEM could not be used as a verification key (message says why)."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """A public key with its lookup id and, if the publisher pinned one, its algorithm."""

    kid: str
    key: PublicKey
    algorithm: str | None = None

    def fits(self, alg: str) -> bool:
        """Whether this key may verify a signature made with ``alg`` (type, curve and size match)."""
        if self.algorithm is not None and self.algorithm != alg:
            return False
        if alg.startswith(("RS", "PS")):
            return isinstance(self.key, rsa.RSAPublicKey) and self.key.key_size >= _MIN_RSA_BITS
        if alg in _EC_CURVES:
            return isinstance(self.key, ec.EllipticCurvePublicKey) and self.key.curve.name == _EC_CURVES[alg]
        if alg == "EdDSA":
            return isinstance(self.key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey)
        return False

    @classmethod
    def from_jwk(cls, jwk: dict[str, Any]) -> VerificationKey:
        """Build from one JWK; raises ``KeyFormatError`` for symmetric, private or odd keys."""
        kty = jwk.get("kty")
        if kty not in _THUMBPRINT_MEMBERS:
            raise KeyFormatError(f"unsupported kty {kty!r}")
        if _PRIVATE_MEMBERS & jwk.keys():
            raise KeyFormatError("JWK carries private key material")
        kid = jwk.get("kid")
        alg = jwk.get("alg")
        if not isinstance(kid, str | None) or not isinstance(alg, str | None):
            raise KeyFormatError("kid and alg must be strings")
        try:
            key = jwt.PyJWK(jwk, algorithm=alg).key
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
            raise KeyFormatError(f"invalid JWK: {exc}") from exc
        if not isinstance(key, PublicKey):
            raise KeyFormatError("JWK is not an asymmetric public key")
        return cls(kid=kid or thumbprint(jwk), key=key, algorithm=alg)

    @classmethod
    def from_public_key(cls, key: PublicKey) -> VerificationKey:
        """Wrap a key from a PEM file; its kid is the RFC 7638 thumbprint."""
        return cls(kid=thumbprint(_public_jwk(key)), key=key)


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url without padding)."""
    members = {name: jwk[name] for name in _THUMBPRINT_MEMBERS[str(jwk["kty"])]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


def load_key_file(path: Path) -> list[VerificationKey]:
    """Read a PEM public key, or a JSON file with one JWK or a JWKS (``{"keys": [...]}``)."""
    data = path.read_bytes()
    if data.lstrip().startswith(b"{"):
        document = json.loads(data)
        jwks = document["keys"] if isinstance(document, dict) and "keys" in document else [document]
        if not isinstance(jwks, list) or not all(isinstance(jwk, dict) for jwk in jwks):
            raise KeyFormatError(f"{path}: not a JWK or JWKS")
        return [VerificationKey.from_jwk(jwk) for jwk in jwks]
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise KeyFormatError(f"{path}: not a PEM public key ({exc})") from exc
    if not isinstance(key, PublicKey):
        raise KeyFormatError(f"{path}: unsupported key type {type(key).__name__}")
    return [VerificationKey.from_public_key(key)]


def _public_jwk(key: PublicKey) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPublicKey):
        jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    elif isinstance(key, ec.EllipticCurvePublicKey):
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key))
    else:
        jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key))
    return jwk
