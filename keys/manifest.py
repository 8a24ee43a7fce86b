"""``manifest.json`` lists every file of a sealed model; ``manifest.sig`` signs its exact bytes.

The manifest carries plaintext sizes and SHA-256 digests, so a model can be checked against the
checkpoint it was sealed from. It never mentions the master key version: rotation rewraps the
data key in the file headers and re-signs these same bytes under the new signing key.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
from pathlib import Path

import msgspec

from keys._crypto import AuthenticationFailed, ed25519_verify
from keys.errors import KeysError, ManifestError, ManifestSignatureError
from keys.provider import KeyProvider, KeyRef, Signature

MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
SEALED_SUFFIX = ".sealed"
MANIFEST_FORMAT = "strongroom-sealed-model/1"
SIGNATURE_ALGORITHM = "Ed25519"


class ManifestFile(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    """Relative posix path in the plaintext model directory."""
    size: int
    """Plaintext bytes."""
    sha256: str
    """Hex SHA-256 of the plaintext (what ``sha256sum`` prints; checked by verify_model and unseal)."""
    tags_sha256: str
    """Hex SHA-256 over the 16-byte AES-GCM tags of every chunk, in order.

    Checked on every whole-file load, for free: it pins the exact ciphertext the signer produced,
    while each tag already authenticates its chunk's plaintext. The flat ``sha256`` costs a
    serial pass over the plaintext (slower than decryption), so only verify and unseal run it."""

    @property
    def sealed_name(self) -> str:
        return self.name + SEALED_SUFFIX


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    model_id: str
    seal_id: str
    """Random per sealing; bound into every file key, so files cannot move between sealings."""
    created_at: str
    chunk_size: int
    files: tuple[ManifestFile, ...]

    def file(self, name: str) -> ManifestFile | None:
        return next((f for f in self.files if f.name == name), None)

    def encode(self) -> bytes:
        return msgspec.json.encode(self, order="sorted")

    @classmethod
    def decode(cls, raw: bytes, where: str) -> Manifest:
        try:
            manifest = msgspec.json.decode(raw, type=cls)
        except msgspec.DecodeError as exc:
            raise ManifestError(f"{where}: malformed manifest ({exc})") from None
        if manifest.format != MANIFEST_FORMAT:
            raise ManifestError(f"{where}: unsupported manifest format {manifest.format!r}")
        names = [f.name for f in manifest.files]
        if len(set(names)) != len(names):
            raise ManifestError(f"{where}: manifest lists a file twice")
        for name in names:
            check_file_name(name, where)
        return manifest


class SignatureFile(msgspec.Struct, frozen=True, kw_only=True):
    alg: str
    key_id: str
    version: int
    signature: str
    """Base64 Ed25519 signature over the exact bytes of manifest.json."""


def check_file_name(name: str, where: str) -> None:
    """Reject names that could escape the model directory or collide with the manifest."""
    normalized = posixpath.normpath(name)
    if (
        not name
        or name != normalized
        or name.startswith(("/", "../"))
        or name == ".."
        or "\\" in name
        or "\x00" in name
        or name in (MANIFEST_NAME, SIGNATURE_NAME)
    ):
        raise ManifestError(f"{where}: unsafe file name {name!r}")


def encode_signature(signature: Signature) -> bytes:
    body = SignatureFile(
        alg=SIGNATURE_ALGORITHM,
        key_id=signature.ref.key_id,
        version=signature.ref.version,
        signature=base64.b64encode(signature.value).decode(),
    )
    return msgspec.json.encode(body, order="sorted")


def read_verified_manifest(model_dir: Path, provider: KeyProvider) -> tuple[Manifest, KeyRef, str]:
    """Read manifest.json and check manifest.sig before anything in it is trusted.

    Returns the manifest, the key version that signed it, and the hex SHA-256 of its exact bytes
    (the sealing's identity in the seal registry and in every inference record)."""
    where = str(model_dir)
    try:
        raw = (model_dir / MANIFEST_NAME).read_bytes()
        raw_sig = (model_dir / SIGNATURE_NAME).read_bytes()
    except FileNotFoundError as exc:
        raise ManifestError(f"{where}: not a sealed model ({Path(str(exc.filename)).name} missing)") from None
    try:
        sig = msgspec.json.decode(raw_sig, type=SignatureFile)
        value = base64.b64decode(sig.signature, validate=True)
    except (msgspec.DecodeError, ValueError):
        raise ManifestSignatureError(f"{where}/{SIGNATURE_NAME}: malformed signature file") from None
    ref = KeyRef(key_id=sig.key_id, version=sig.version)
    if encode_signature(Signature(ref=ref, value=value)) != raw_sig:
        # Only the canonical encoding is accepted, so no byte of manifest.sig is malleable.
        raise ManifestSignatureError(f"{where}/{SIGNATURE_NAME}: signature file is not in canonical form")
    if sig.alg != SIGNATURE_ALGORITHM:
        raise ManifestSignatureError(f"{where}/{SIGNATURE_NAME}: algorithm {sig.alg!r} is not accepted")
    try:
        public_key = provider.signing_public_key(ref.key_id, ref.version)
    except KeysError as exc:
        raise ManifestSignatureError(f"{where}/{SIGNATURE_NAME}: signed by {ref}: {exc.message}") from exc
    try:
        ed25519_verify(public_key, value, raw)
    except AuthenticationFailed:
        raise ManifestSignatureError(
            f"{where}/{MANIFEST_NAME}: signature does not verify under {ref} (manifest or signature altered)"
        ) from None
    return Manifest.decode(raw, f"{where}/{MANIFEST_NAME}"), ref, hashlib.sha256(raw).hexdigest()
