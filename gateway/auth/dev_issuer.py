"""The built-in dev issuer: an Ed25519 key under data_dir that mints tokens for local use.

The private key lives in ``<data_dir>/keys/dev-signing-key.pem`` (mode 0600) and is created on
first use; the public half sits next to it as ``dev-signing-key.pub.pem``. Creation is atomic
(write a temporary file, then hard-link it into place), so a CLI and a server starting together
end up with the same key. The verifier trusts this issuer only while ``auth.dev_issuer`` is on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gateway.auth.config import IssuerConfig
from gateway.auth.errors import AuthConfigError
from gateway.auth.verification_key import VerificationKey

__all__ = ["DEV_AUDIENCE", "DEV_ISSUER", "DevIssuer"]

DEV_ISSUER = "strongroom-dev"
DEV_AUDIENCE = "strongroom"
_PRIVATE_NAME = "dev-signing-key.pem"
_PUBLIC_NAME = "dev-signing-key.pub.pem"


class DevIssuer:
    """Mints EdDSA tokens for the ``strongroom-dev`` issuer. Holds a private key: repr redacts it."""

    def __init__(
        self,
        private_key: ed25519.Ed25519PrivateKey,
        public_key_path: Path,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._private_key = private_key
        self._public_key_path = public_key_path
        self._clock = clock
        self.kid = VerificationKey.from_public_key(private_key.public_key()).kid
        """RFC 7638 thumbprint of the public key; put in every token's header."""

    def __repr__(self) -> str:
        return f"DevIssuer(kid={self.kid!r}, key=<redacted>)"

    @classmethod
    def load_or_create(cls, data_dir: Path | str, *, clock: Callable[[], float] = time.time) -> DevIssuer:
        """Load the dev key from ``<data_dir>/keys``, creating it (0600) on first use."""
        key_dir = Path(data_dir) / "keys"
        key_dir.mkdir(parents=True, exist_ok=True)
        private_path = key_dir / _PRIVATE_NAME
        if not private_path.exists():
            _create_private_key(private_path)
        private_key = _read_private_key(private_path)
        public_path = key_dir / _PUBLIC_NAME
        public_pem = private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if not public_path.exists() or public_path.read_bytes() != public_pem:
            _write_atomically(public_path, public_pem, mode=0o644, replace=True)
        return cls(private_key, public_path, clock=clock)

    def mint(
        self,
        sub: str,
        roles: Sequence[str],
        *,
        ttl_s: int = 3600,
        tenant: str | None = None,
        client_id: str | None = None,
    ) -> str:
        """A signed token for ``sub`` with ``roles`` (claim ``roles``), valid for ``ttl_s`` seconds."""
        if not sub:
            raise ValueError("sub must not be empty")
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        issued_at = int(self._clock())
        claims: dict[str, object] = {
            "iss": DEV_ISSUER,
            "aud": DEV_AUDIENCE,
            "sub": sub,
            "roles": list(roles),
            "iat": issued_at,
            "exp": issued_at + ttl_s,
            "jti": secrets.token_urlsafe(16),
        }
        if tenant is not None:
            claims["tenant"] = tenant
        if client_id is not None:
            claims["client_id"] = client_id
        return jwt.encode(claims, self._private_key, algorithm="EdDSA", headers={"kid": self.kid})

    def issuer_config(self) -> IssuerConfig:
        """How the verifier trusts this issuer: EdDSA only, key from the public PEM file."""
        return IssuerConfig(
            issuer=DEV_ISSUER,
            audiences=(DEV_AUDIENCE,),
            algorithms=("EdDSA",),
            key_files=(str(self._public_key_path),),
            tenant_claim="tenant",
        )


def _create_private_key(path: Path) -> None:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_atomically(path, pem, mode=0o600, replace=False)


def _read_private_key(path: Path) -> ed25519.Ed25519PrivateKey:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuthConfigError(f"{path} is readable by others (mode {stat.filemode(mode)}); chmod 600 it")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise AuthConfigError(f"{path} is not an Ed25519 private key")
    return key


def _write_atomically(path: Path, data: bytes, *, mode: int, replace: bool) -> None:
    """Write ``data`` to ``path`` so that readers see all of it or nothing.

    With ``replace=False`` an existing file wins (another process created it first).
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if replace:
            os.replace(temp, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)
    finally:
        temp.unlink(missing_ok=True)
