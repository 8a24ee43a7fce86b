"""``SealRegistry``: every sealing this installation made or accepted, one version sequence per model.

A sealed directory proves who sealed it (the manifest signature) but not that it is the newest
sealing of its model, nor that it sits where it should: an older sealing copied back, or two
models' directories swapped, both verify. The registry closes that gap:

- every sealing is registered with its path, ``seal_id`` and the SHA-256 of its manifest bytes,
  under a version that counts up from 1 per ``model_id``;
- loading refuses a sealing that is not registered, whose manifest digest differs from the
  registered one, or that is older than the newest registered version of its model unless an
  admin pinned exactly that sealing;
- rotation rewraps every registered path (wherever it lives), and a key version still wrapping
  any registered model is never retired.

The file is one JSON document signed with the master key's current signing key, so editing it
without the key (to register a stale copy, or drop a newer version) is detected on the next read::

    {"body": "<canonical JSON of RegistryBody>", "signature": {alg, key_id, version, signature}}

Writers hold an ``flock`` on a sibling lock file (flock, not POSIX locks: closing another handle
of the same file must not drop it) and replace the file atomically.
"""

from __future__ import annotations

import base64
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from keys._crypto import AuthenticationFailed, ed25519_verify
from keys.errors import KeysError, SealRegistryError
from keys.manifest import SIGNATURE_ALGORITHM, SignatureFile, encode_signature
from keys.provider import KeyProvider

REGISTRY_FORMAT = "strongroom-seal-registry/1"


class Sealing(msgspec.Struct, frozen=True, kw_only=True):
    """One registered sealing of a model."""

    model_id: str
    version: int
    """Counts up from 1 per model_id, in order of registration."""
    seal_id: str
    manifest_sha256: str
    """Hex SHA-256 of the exact manifest.json bytes (what inference records carry)."""
    path: str
    """Absolute path of the sealed directory when it was registered."""
    registered_at: str
    registered_by: str


class RegistryBody(msgspec.Struct, frozen=True, kw_only=True):
    format: str = REGISTRY_FORMAT
    sealings: tuple[Sealing, ...] = ()
    pins: dict[str, str] = msgspec.field(default_factory=dict)
    """model_id -> seal_id an admin chose to serve although a newer sealing is registered."""

    def find(self, seal_id: str) -> Sealing | None:
        return next((s for s in self.sealings if s.seal_id == seal_id), None)


class _SignedRegistry(msgspec.Struct, frozen=True, kw_only=True):
    body: str
    signature: SignatureFile


class SealRegistry:
    """The registry file at ``path``; every read checks its signature with ``provider``."""

    def __init__(self, path: str | Path, provider: KeyProvider) -> None:
        self._path = Path(path)
        self._provider = provider

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> RegistryBody:
        """The verified registry; an absent file is an empty registry."""
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return RegistryBody()
        where = str(self._path)
        try:
            signed = msgspec.json.decode(raw, type=_SignedRegistry)
            value = base64.b64decode(signed.signature.signature, validate=True)
        except (msgspec.DecodeError, ValueError):
            raise SealRegistryError(f"{where}: malformed seal registry") from None
        sig = signed.signature
        if sig.alg != SIGNATURE_ALGORITHM:
            raise SealRegistryError(f"{where}: signature algorithm {sig.alg!r} is not accepted")
        try:
            public_key = self._provider.signing_public_key(sig.key_id, sig.version)
            ed25519_verify(public_key, value, signed.body.encode())
        except (KeysError, AuthenticationFailed):
            raise SealRegistryError(
                f"{where}: seal registry signature does not verify (edited, or signed by a retired key)"
            ) from None
        try:
            body = msgspec.json.decode(signed.body, type=RegistryBody)
        except msgspec.DecodeError:
            raise SealRegistryError(f"{where}: malformed seal registry body") from None
        if body.format != REGISTRY_FORMAT:
            raise SealRegistryError(f"{where}: unsupported seal registry format {body.format!r}")
        return body

    def _write(self, body: RegistryBody) -> None:
        encoded = msgspec.json.encode(body, order="sorted")
        signature = msgspec.json.decode(encode_signature(self._provider.sign(encoded)), type=SignatureFile)
        raw = msgspec.json.encode(_SignedRegistry(body=encoded.decode(), signature=signature), order="sorted")
        tmp = self._path.with_name(self._path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._path)

    @contextmanager
    def _locked(self) -> Iterator[RegistryBody]:
        self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._path.with_name(self._path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.read()
        finally:
            os.close(fd)

    def register(
        self, model_id: str, seal_id: str, manifest_sha256: str, path: str | Path, by: str
    ) -> Sealing:
        """Add a sealing as the newest version of ``model_id`` (idempotent for the same seal_id)."""
        with self._locked() as body:
            known = body.find(seal_id)
            if known is not None:
                if known.manifest_sha256 != manifest_sha256 or known.model_id != model_id:
                    raise SealRegistryError(
                        f"seal {seal_id} is registered for {known.model_id!r} with another manifest"
                    )
                return known
            version = 1 + max((s.version for s in body.sealings if s.model_id == model_id), default=0)
            sealing = Sealing(
                model_id=model_id,
                version=version,
                seal_id=seal_id,
                manifest_sha256=manifest_sha256,
                path=str(Path(path).resolve()),
                registered_at=datetime.now(UTC).isoformat(timespec="seconds"),
                registered_by=by,
            )
            self._write(msgspec.structs.replace(body, sealings=(*body.sealings, sealing)))
            return sealing

    def unregister(self, seal_id: str) -> Sealing:
        """Forget one sealing (its directory was destroyed); its key versions may then be retired."""
        with self._locked() as body:
            found = body.find(seal_id)
            if found is None:
                raise SealRegistryError(f"seal {seal_id} is not registered")
            pins = {m: s for m, s in body.pins.items() if s != seal_id}
            kept = tuple(s for s in body.sealings if s.seal_id != seal_id)
            self._write(msgspec.structs.replace(body, sealings=kept, pins=pins))
            return found

    def pin(self, model_id: str, seal_id: str | None) -> Sealing | None:
        """Serve exactly ``seal_id`` for ``model_id`` even if newer sealings exist; None unpins."""
        with self._locked() as body:
            pins = dict(body.pins)
            if seal_id is None:
                pins.pop(model_id, None)
                self._write(msgspec.structs.replace(body, pins=pins))
                return None
            found = body.find(seal_id)
            if found is None or found.model_id != model_id:
                raise SealRegistryError(f"seal {seal_id} is not a registered sealing of {model_id!r}")
            pins[model_id] = seal_id
            self._write(msgspec.structs.replace(body, pins=pins))
            return found

    def resign(self) -> None:
        """Sign the registry again under the current key (rotation does this before retiring)."""
        with self._locked() as body:
            self._write(body)

    def check(self, model_id: str, seal_id: str, manifest_sha256: str, where: str) -> Sealing:
        """The registered sealing, if ``seal_id`` may be served as ``model_id``; else SealRegistryError."""
        body = self.read()
        found = body.find(seal_id)
        if found is None or found.model_id != model_id:
            raise SealRegistryError(
                f"{where}: sealing {seal_id} of {model_id!r} is not registered "
                "(register it with `strongroom models register`)"
            )
        if found.manifest_sha256 != manifest_sha256:
            raise SealRegistryError(f"{where}: manifest differs from the one registered for seal {seal_id}")
        pinned = body.pins.get(model_id)
        if pinned is not None:
            if pinned != seal_id:
                raise SealRegistryError(f"{where}: {model_id!r} is pinned to seal {pinned}; refused")
            return found
        newest = max(s.version for s in body.sealings if s.model_id == model_id)
        if found.version < newest:
            raise SealRegistryError(
                f"{where}: sealing v{found.version} of {model_id!r} is older than the newest registered "
                f"v{newest}; refused (an admin can pin it with `strongroom models pin`)"
            )
        return found
