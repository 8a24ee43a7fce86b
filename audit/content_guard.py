"""What is kept of prompts and completions, per role and model, and how it is protected.

``hmac``: HMAC-SHA256 under a secret salt, as Vault's audit-hash does: an investigator holding
a candidate text can check whether it was sent, nobody can read it back.
``encrypt``: AES-256-GCM under the audit key, the AAD binding the ciphertext to (log id, seq),
so ciphertext moved to another record fails to open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Protocol

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from audit.canonical import canonical_json
from audit.config import AuditConfig, ContentMode
from audit.errors import AuditConfigError, AuditIntegrityError
from audit.record import AuditContent, StoredContent
from audit.signer import write_secret_file
from common.audit_event import AuditEvent


class ContentKeyProvider(Protocol):
    """Where the content keys come from; ``keys/`` can provide one backed by its key ring."""

    def hmac_key(self) -> bytes: ...

    def encryption_key(self) -> bytes: ...


class FileContentKeys:
    """Keys in two 32-byte files under the data dir, created 0600 on first use."""

    def __init__(self, hmac_path: Path, encryption_path: Path) -> None:
        self._hmac_path = hmac_path
        self._encryption_path = encryption_path

    def __repr__(self) -> str:
        return "FileContentKeys(<redacted>)"

    def hmac_key(self) -> bytes:
        return _load_or_create(self._hmac_path)

    def encryption_key(self) -> bytes:
        return _load_or_create(self._encryption_path)


def _load_or_create(path: Path) -> bytes:
    if not path.exists():
        write_secret_file(path, secrets.token_bytes(32))
    key = path.read_bytes()
    if len(key) != 32:
        raise AuditConfigError(f"audit content key {path} must hold exactly 32 bytes")
    return key


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"strongroom.audit.content-key\n" + key).hexdigest()[:16]


class ContentGuard:
    def __init__(self, cfg: AuditConfig, keys: ContentKeyProvider) -> None:
        self._cfg = cfg
        self._keys = keys
        self._hmac_key: bytes | None = None
        self._aead: AESGCM | None = None
        self._aead_key_id = ""

    def __repr__(self) -> str:
        return "ContentGuard(<redacted>)"

    def mode_for(self, event: AuditEvent) -> ContentMode:
        for rule in self._cfg.content_rules:
            role_match = "*" in rule.roles or any(role in rule.roles for role in event.roles)
            if role_match and any(fnmatchcase(event.model, pattern) for pattern in rule.models):
                return rule.mode
        return self._cfg.content_default

    def protect(
        self, mode: ContentMode, content: AuditContent, *, log_id: str, seq: int
    ) -> StoredContent | None:
        if mode == "none":
            return None
        if mode == "hmac":
            key = self._hmac()
            return StoredContent(
                mode="hmac",
                key_id=_key_id(key),
                prompt_hmac=_digest(key, content.prompt),
                completion_hmac=_digest(key, content.completion),
            )
        aead, key_id = self._cipher()
        nonce = os.urandom(12)
        plain = canonical_json({"prompt": content.prompt, "completion": content.completion})
        sealed = aead.encrypt(nonce, plain, _aad(log_id, seq))
        return StoredContent(
            mode="encrypt",
            key_id=key_id,
            nonce=base64.b64encode(nonce).decode(),
            ciphertext=base64.b64encode(sealed).decode(),
        )

    def open(self, stored: StoredContent, *, log_id: str, seq: int) -> AuditContent:
        if stored.mode != "encrypt":
            raise AuditIntegrityError("content was kept as an HMAC only; it cannot be read back")
        aead, key_id = self._cipher()
        if stored.key_id != key_id:
            raise AuditIntegrityError("content was encrypted under another audit key")
        try:
            plain = aead.decrypt(
                base64.b64decode(stored.nonce), base64.b64decode(stored.ciphertext), _aad(log_id, seq)
            )
        except (InvalidTag, ValueError) as exc:
            raise AuditIntegrityError("stored content failed authentication") from exc
        parts = msgspec.json.decode(plain, type=dict[str, str])
        return AuditContent(prompt=parts["prompt"], completion=parts["completion"])

    def matches(self, stored: StoredContent, text: str) -> dict[str, bool]:
        """Investigator check: was ``text`` the prompt or the completion of this record?"""
        if stored.mode == "hmac":
            digest = _digest(self._hmac(), text)
            return {
                "prompt": hmac.compare_digest(digest, stored.prompt_hmac),
                "completion": hmac.compare_digest(digest, stored.completion_hmac),
            }
        raise AuditIntegrityError("matching needs HMAC-mode content; read encrypted content instead")

    def hmac_of(self, text: str) -> str:
        return _digest(self._hmac(), text)

    def _hmac(self) -> bytes:
        if self._hmac_key is None:
            self._hmac_key = self._keys.hmac_key()
        return self._hmac_key

    def _cipher(self) -> tuple[AESGCM, str]:
        if self._aead is None:
            key = self._keys.encryption_key()
            self._aead = AESGCM(key)
            self._aead_key_id = _key_id(key)
        return self._aead, self._aead_key_id


def _digest(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def _aad(log_id: str, seq: int) -> bytes:
    return f"strongroom.audit.content.v1\n{log_id}\n{seq}".encode()
