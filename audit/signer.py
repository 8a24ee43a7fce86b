"""Ed25519 signing of checkpoints, and verification with a trusted public key only.

The signing key is a PKCS#8 PEM file (``audit.signing_key_file``; for several gateways, one
secret mounted into each) or a key inside a PKCS#11 token (``audit.signing_key_provider =
"pkcs11"``, see ``token_signing_key.py``). Either way all writers of one log sign with one key.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.checkpoint import signing_bytes
from audit.config import AuditConfig
from audit.errors import AuditConfigError


class SigningKey(Protocol):
    """An Ed25519 private key that signs, in memory (``Ed25519PrivateKey``) or in a token."""

    def sign(self, data: bytes) -> bytes: ...

    def public_key(self) -> Ed25519PublicKey: ...


def key_id_of(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def fingerprint_of(public_key: Ed25519PublicKey) -> str:
    """The full SHA-256 of the raw key, for pinning (``key_id`` is a short label, not a pin)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


class CheckpointVerifier:
    """Checks signatures against one public key given by the verifier, never one from the log."""

    def __init__(self, public_key: Ed25519PublicKey) -> None:
        self._public_key = public_key
        self.key_id = key_id_of(public_key)
        self.fingerprint = fingerprint_of(public_key)

    @classmethod
    def from_pem(cls, pem: bytes) -> CheckpointVerifier:
        try:
            key = serialization.load_pem_public_key(pem)
        except ValueError as exc:
            raise AuditConfigError("not a PEM public key") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise AuditConfigError("audit public key must be Ed25519")
        return cls(key)

    def is_valid(self, kind: str, payload: dict[str, Any], signature: str) -> bool:
        try:
            self._public_key.verify(base64.b64decode(signature, validate=True), signing_bytes(kind, payload))
        except (InvalidSignature, ValueError):
            return False
        return True


class CheckpointSigner:
    def __init__(self, private_key: SigningKey) -> None:
        self._private_key = private_key
        self.verifier = CheckpointVerifier(private_key.public_key())
        self.key_id = self.verifier.key_id

    def __repr__(self) -> str:
        return f"CheckpointSigner(key_id={self.key_id!r})"

    @classmethod
    def open(cls, cfg: AuditConfig, data_dir: Path) -> CheckpointSigner:
        """The signer ``cfg`` configures: the key file (relative to ``data_dir``) or the token."""
        if cfg.signing_key_provider == "pkcs11":
            from audit.token_signing_key import TokenSigningKey

            return cls(TokenSigningKey.connect(cfg))
        return cls.load(cfg.resolve(data_dir, cfg.signing_key_file), create=cfg.create_signing_key)

    @classmethod
    def load(cls, path: Path, *, create: bool) -> CheckpointSigner:
        """Load the PKCS#8 PEM key; in dev mode create it (0600, never overwriting)."""
        if not path.exists():
            if not create:
                raise AuditConfigError(f"audit signing key {path} is missing")
            _write_new_key(path)
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise AuditConfigError(f"audit signing key {path} is unreadable") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise AuditConfigError("audit signing key must be Ed25519")
        return cls(key)

    def sign(self, kind: str, payload: dict[str, Any]) -> str:
        return base64.b64encode(self._private_key.sign(signing_bytes(kind, payload))).decode()

    def public_key_pem(self) -> bytes:
        return self._private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def _write_new_key(path: Path) -> None:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_secret_file(path, pem)


def write_secret_file(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600; fails rather than overwrite an existing key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
