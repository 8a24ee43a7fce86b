"""A master key in a local file the operator controls (``strongroom keys init``).

The file is JSON, mode 0600 (refused if group or others can read it). Each version holds a 32-byte
root secret, from which HKDF derives the key-encryption key and the Ed25519 manifest-signing seed.
With a passphrase, each root is stored AES-256-GCM encrypted under scrypt(passphrase); the
passphrase comes from an environment variable or a prompt and is never written or logged.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import msgspec

from keys import _crypto
from keys.errors import KeysConfigError, WrongKeyError
from keys.provider import KeyRef, KeyStatus, KeyVersionInfo, Signature, WrappedKey, check_live
from keys.secret import Secret

KEY_FILE_FORMAT = "strongroom-keyfile/1"
DEFAULT_SCRYPT_N = 1 << 15


class ScryptParams(msgspec.Struct, frozen=True, kw_only=True):
    salt: str
    n: int
    r: int = 8
    p: int = 1


class StoredVersion(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    status: KeyStatus
    material: str = ""
    """Base64 root secret, or nonce|ciphertext under the passphrase key; empty once retired."""


class KeyFileBody(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    key_id: str
    scrypt: ScryptParams | None
    versions: tuple[StoredVersion, ...]


def _version_ad(key_id: str, version: int, purpose: str) -> bytes:
    return f"strongroom/{purpose}|{key_id}|{version}".encode()


class KeyFileProvider:
    """KeyProvider over a local key file; all live roots are decrypted into memory on load."""

    kind = "file"

    def __init__(
        self, path: Path, body: KeyFileBody, roots: dict[int, bytes], file_key: bytes | None
    ) -> None:
        self._path = path
        self._body = body
        self._roots = roots
        self._file_key = file_key

    @classmethod
    def create(
        cls, path: str | Path, *, passphrase: Secret | None = None, scrypt_n: int = DEFAULT_SCRYPT_N
    ) -> KeyFileProvider:
        """Write a new key file with version 1; KeysConfigError if one exists already."""
        path = Path(path)
        if path.exists():
            raise KeysConfigError(f"{path}: key file exists already; refusing to overwrite it")
        scrypt = None
        file_key = None
        if passphrase is not None:
            salt = _crypto.random_bytes(16)
            scrypt = ScryptParams(salt=base64.b64encode(salt).decode(), n=scrypt_n)
            file_key = _crypto.scrypt_key(passphrase.reveal(), salt=salt, n=scrypt_n, r=scrypt.r, p=scrypt.p)
        key_id = "k-" + _crypto.random_bytes(8).hex()
        body = KeyFileBody(format=KEY_FILE_FORMAT, key_id=key_id, scrypt=scrypt, versions=())
        provider = cls(path, body, {}, file_key)
        provider._add_version(1)
        return provider

    @staticmethod
    def needs_passphrase(path: str | Path) -> bool:
        """Whether the key file at ``path`` is passphrase-protected (False if unreadable)."""
        try:
            return msgspec.json.decode(Path(path).read_bytes(), type=KeyFileBody).scrypt is not None
        except (OSError, msgspec.DecodeError):
            return False

    @classmethod
    def load(cls, path: str | Path, *, passphrase: Secret | None = None) -> KeyFileProvider:
        path = Path(path)
        try:
            info = path.stat()
            raw = path.read_bytes()
        except FileNotFoundError:
            raise KeysConfigError(
                f"{path}: key file not found (create one with `strongroom keys init`)"
            ) from None
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeysConfigError(f"{path}: key file is accessible by group or others; chmod 600 it")
        try:
            body = msgspec.json.decode(raw, type=KeyFileBody)
        except msgspec.DecodeError:
            raise KeysConfigError(f"{path}: not a strongroom key file") from None
        if body.format != KEY_FILE_FORMAT:
            raise KeysConfigError(f"{path}: unsupported key file format {body.format!r}")
        file_key = None
        if body.scrypt is not None:
            if passphrase is None:
                raise KeysConfigError(f"{path}: key file is passphrase-protected and no passphrase was given")
            p = body.scrypt
            salt = base64.b64decode(p.salt)
            file_key = _crypto.scrypt_key(passphrase.reveal(), salt=salt, n=p.n, r=p.r, p=p.p)
        roots: dict[int, bytes] = {}
        for stored in body.versions:
            if stored.status is not KeyStatus.RETIRED:
                roots[stored.version] = cls._open_material(path, body.key_id, stored, file_key)
        return cls(path, body, roots, file_key)

    @staticmethod
    def _open_material(path: Path, key_id: str, stored: StoredVersion, file_key: bytes | None) -> bytes:
        material = base64.b64decode(stored.material)
        if file_key is None:
            return material
        nonce, sealed = material[: _crypto.NONCE_BYTES], material[_crypto.NONCE_BYTES :]
        try:
            return _crypto.Cipher(file_key).decrypt(
                nonce, sealed, _version_ad(key_id, stored.version, "root")
            )
        except _crypto.AuthenticationFailed:
            raise KeysConfigError(f"{path}: wrong passphrase (or the key file was altered)") from None

    def _seal_material(self, version: int, root: bytes) -> str:
        if self._file_key is None:
            return base64.b64encode(root).decode()
        nonce = _crypto.random_bytes(_crypto.NONCE_BYTES)
        sealed = _crypto.Cipher(self._file_key).encrypt(
            nonce, root, _version_ad(self._body.key_id, version, "root")
        )
        return base64.b64encode(nonce + sealed).decode()

    def _add_version(self, version: int) -> None:
        root = _crypto.random_bytes(_crypto.KEY_BYTES)
        demoted = tuple(
            msgspec.structs.replace(v, status=KeyStatus.PREVIOUS) if v.status is KeyStatus.CURRENT else v
            for v in self._body.versions
        )
        added = StoredVersion(
            version=version, status=KeyStatus.CURRENT, material=self._seal_material(version, root)
        )
        self._save(msgspec.structs.replace(self._body, versions=(*demoted, added)))
        self._roots[version] = root

    def _save(self, body: KeyFileBody) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(msgspec.json.format(msgspec.json.encode(body, order="sorted")))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._path)
        self._body = body

    @property
    def path(self) -> Path:
        return self._path

    def current(self) -> KeyRef:
        version = max(v.version for v in self._body.versions)
        return KeyRef(key_id=self._body.key_id, version=version)

    def versions(self) -> list[KeyVersionInfo]:
        return [
            KeyVersionInfo(
                ref=KeyRef(key_id=self._body.key_id, version=v.version),
                status=v.status,
                signing_public_key=self.signing_public_key(self._body.key_id, v.version).hex()
                if v.version in self._roots
                else "",
            )
            for v in self._body.versions
        ]

    def _root(self, key_id: str, version: int) -> bytes:
        oldest_live = min(self._roots, default=self.current().version + 1)
        check_live(
            KeyRef(key_id=key_id, version=version), self._body.key_id, self.current().version, oldest_live
        )
        return self._roots[version]

    def _kek(self, key_id: str, version: int) -> _crypto.Cipher:
        root = self._root(key_id, version)
        return _crypto.Cipher(_crypto.derive_key(root, salt=b"", info=b"strongroom/kek"))

    def _signing_seed(self, key_id: str, version: int) -> bytes:
        return _crypto.derive_key(self._root(key_id, version), salt=b"", info=b"strongroom/manifest-signing")

    def wrap(self, dek: bytes) -> WrappedKey:
        ref = self.current()
        nonce = _crypto.random_bytes(_crypto.NONCE_BYTES)
        sealed = self._kek(ref.key_id, ref.version).encrypt(
            nonce, dek, _version_ad(ref.key_id, ref.version, "dek")
        )
        return WrappedKey(ref=ref, blob=nonce + sealed)

    def unwrap(self, blob: bytes, key_id: str, version: int) -> bytes:
        kek = self._kek(key_id, version)
        nonce, sealed = blob[: _crypto.NONCE_BYTES], blob[_crypto.NONCE_BYTES :]
        try:
            return kek.decrypt(nonce, sealed, _version_ad(key_id, version, "dek"))
        except _crypto.AuthenticationFailed:
            raise WrongKeyError(
                f"data key does not unwrap under {key_id}/v{version} (different key material, or altered)"
            ) from None

    def sign(self, message: bytes) -> Signature:
        ref = self.current()
        return Signature(
            ref=ref, value=_crypto.ed25519_sign(self._signing_seed(ref.key_id, ref.version), message)
        )

    def signing_public_key(self, key_id: str, version: int) -> bytes:
        return _crypto.ed25519_public_key(self._signing_seed(key_id, version))

    def rotate(self) -> KeyRef:
        self._add_version(self.current().version + 1)
        return self.current()

    def retire_before(self, version: int) -> list[KeyRef]:
        retired = [
            v for v in self._body.versions if v.version < version and v.status is not KeyStatus.RETIRED
        ]
        if not retired:
            return []
        kept = tuple(
            StoredVersion(version=v.version, status=KeyStatus.RETIRED) if v in retired else v
            for v in self._body.versions
        )
        self._save(msgspec.structs.replace(self._body, versions=kept))
        for v in retired:
            del self._roots[v.version]
        return [KeyRef(key_id=self._body.key_id, version=v.version) for v in retired]

    def __repr__(self) -> str:
        return f"KeyFileProvider({str(self._path)!r}, key={self.current()}, material=<redacted>)"
