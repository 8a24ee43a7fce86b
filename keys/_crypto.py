"""The only module that touches cryptographic primitives; everything else in keys/ calls these verbs.

Choices are pinned here and nowhere else: AES-256-GCM with 96-bit nonces and 128-bit tags,
HKDF-SHA256 for per-file keys, scrypt for passphrases, Ed25519 for manifest signatures.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_CALL_BYTES = (1 << 31) - 1
"""One AES-GCM call in cryptography takes fewer than 2^31 bytes."""

__all__ = [
    "KEY_BYTES",
    "MAX_CALL_BYTES",
    "NONCE_BYTES",
    "TAG_BYTES",
    "AuthenticationFailed",
    "Cipher",
    "constant_time_equal",
    "derive_key",
    "ed25519_public_key",
    "ed25519_sign",
    "ed25519_verify",
    "random_bytes",
    "scrypt_key",
    "sha256",
    "sha256_of",
]


class AuthenticationFailed(Exception):
    """An AEAD tag or a signature did not verify. Callers turn this into an error naming the file."""


def random_bytes(n: int) -> bytes:
    return secrets.token_bytes(n)


def sha256() -> hashlib._Hash:
    return hashlib.sha256()


def sha256_of(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def constant_time_equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def derive_key(ikm: bytes, *, salt: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info).derive(ikm)


def scrypt_key(passphrase: bytes, *, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=KEY_BYTES, n=n, r=r, p=p).derive(passphrase)


class Cipher:
    """AES-256-GCM under one key. Thread-safe: cryptography releases the GIL inside each call."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("AES-256-GCM needs a 32-byte key")
        self._aead = AESGCM(key)

    def encrypt(self, nonce: bytes, data: bytes | memoryview, ad: bytes) -> bytes:
        return self._aead.encrypt(nonce, data, ad)

    def decrypt(self, nonce: bytes, data: bytes | memoryview, ad: bytes) -> bytes:
        try:
            return self._aead.decrypt(nonce, data, ad)
        except InvalidTag:
            raise AuthenticationFailed from None

    def decrypt_into(self, nonce: bytes, data: bytes | memoryview, ad: bytes, out: memoryview) -> None:
        """Decrypt ``data`` (ciphertext || tag) into ``out``, which is exactly len(data) - 16 bytes."""
        try:
            self._aead.decrypt_into(nonce, data, ad, out)
        except InvalidTag:
            raise AuthenticationFailed from None

    def __repr__(self) -> str:
        return "Cipher(<redacted>)"


def ed25519_public_key(seed: bytes) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def ed25519_sign(seed: bytes, message: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)


def ed25519_verify(public_key: bytes, signature: bytes, message: bytes) -> None:
    """Raise AuthenticationFailed unless ``signature`` is a valid Ed25519 signature of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        raise AuthenticationFailed from None
