"""A master key inside a PKCS#11 token (an HSM; SoftHSM2 in tests), through python-pkcs11.

Per version N of key id K the token holds, as non-extractable token objects:
  "K/kek/vN"   AES-256 secret key; data keys are wrapped with CKM_AES_GCM inside the token
               (random 96-bit IV, AD = key id and version), so the KEK never leaves it;
  "K/sign/vN"  Ed25519 key pair (CKM_EC_EDWARDS_KEY_PAIR_GEN, CKM_EDDSA, which SoftHSM2 >= 2.6
               supports); manifests are signed inside the token, the public key is read out.
Retiring a version destroys its objects. The PIN comes from an environment variable.
"""

from __future__ import annotations

import threading
from typing import Any

import pkcs11
from pkcs11 import Attribute, KeyType, Mechanism, MechanismFlag, ObjectClass
from pkcs11.mechanisms import GCMParams
from pkcs11.util.ec import encode_named_curve_parameters

from keys import _crypto
from keys.errors import KeyProviderUnavailableError, KeysConfigError, WrongKeyError
from keys.provider import KeyRef, KeyStatus, KeyVersionInfo, Signature, WrappedKey, check_live
from keys.secret import Secret

_ED25519_OID = "1.3.101.112"


def _label(key_id: str, purpose: str, version: int) -> str:
    return f"{key_id}/{purpose}/v{version}"


def _raw_ec_point(point: bytes) -> bytes:
    # CKA_EC_POINT is a DER OCTET STRING around the 32-byte key (some tokens give it bare).
    if len(point) == 34 and point[:2] == b"\x04\x20":
        return point[2:]
    return point


class Pkcs11Provider:
    """KeyProvider over one token; a lock serializes the (not thread-safe) PKCS#11 session."""

    kind = "pkcs11"

    def __init__(self, session: Any, key_id: str, where: str) -> None:
        self._session = session
        self._key_id = key_id
        self._where = where
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, module: str, token_label: str, pin: Secret, key_id: str) -> Pkcs11Provider:
        """Log in to the token; KeyProviderUnavailableError naming module/token if that fails."""
        where = f"pkcs11 token {token_label!r} ({module})"
        try:
            lib = pkcs11.lib(module)
        except (RuntimeError, OSError, pkcs11.PKCS11Error) as exc:
            raise KeyProviderUnavailableError(
                f"HSM unavailable: cannot load PKCS#11 module {module} ({exc})"
            ) from None
        try:
            token = lib.get_token(token_label=token_label)
            session = token.open(user_pin=pin.reveal().decode(), rw=True)
        except pkcs11.NoSuchToken:
            raise KeyProviderUnavailableError(
                f"HSM unavailable: no token labelled {token_label!r} in {module}"
            ) from None
        except pkcs11.UserAlreadyLoggedIn:
            # PKCS#11 login is per process and token: another session of ours already logged in.
            session = token.open(rw=True)
        except pkcs11.PinIncorrect:
            raise KeyProviderUnavailableError(f"HSM unavailable: PIN rejected by {where}") from None
        except pkcs11.PKCS11Error as exc:
            raise KeyProviderUnavailableError(f"HSM unavailable: {where}: {type(exc).__name__}") from None
        return cls(session, key_id, where)

    def close(self) -> None:
        with self._lock:
            self._session.close()

    def _live_versions(self) -> list[int]:
        prefix = f"{self._key_id}/kek/v"
        found = []
        for obj in self._session.get_objects({Attribute.CLASS: ObjectClass.SECRET_KEY}):
            label = obj[Attribute.LABEL]
            if label.startswith(prefix) and label[len(prefix) :].isdigit():
                found.append(int(label[len(prefix) :]))
        return sorted(found)

    def _find(self, object_class: ObjectClass, label: str) -> Any:
        try:
            return self._session.get_key(object_class=object_class, label=label)
        except pkcs11.NoSuchKey:
            raise KeyProviderUnavailableError(
                f"{self._where}: object {label!r} missing from the token"
            ) from None

    def _checked(self, key_id: str, version: int) -> None:
        live = self._live_versions()
        if not live:
            raise KeysConfigError(f"{self._where}: no key {self._key_id!r} (run `strongroom keys init`)")
        check_live(KeyRef(key_id=key_id, version=version), self._key_id, live[-1], live[0])

    def initialize(self) -> KeyRef:
        """Create version 1; KeysConfigError if this key id exists on the token already."""
        with self._lock:
            if self._live_versions():
                raise KeysConfigError(f"{self._where}: key {self._key_id!r} exists already")
            self._generate(1)
        return KeyRef(key_id=self._key_id, version=1)

    def _generate(self, version: int) -> None:
        label = _label(self._key_id, "kek", version)
        self._session.generate_key(
            KeyType.AES, 256, label=label, id=label.encode(), store=True,
            capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT,
            template={Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True},
        )  # fmt: skip
        sign_label = _label(self._key_id, "sign", version)
        self._session.generate_keypair(
            KeyType.EC_EDWARDS, store=True, label=sign_label, id=sign_label.encode(),
            public_template={Attribute.EC_PARAMS: encode_named_curve_parameters(_ED25519_OID)},
            private_template={Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True},
        )  # fmt: skip

    def current(self) -> KeyRef:
        with self._lock:
            live = self._live_versions()
        if not live:
            raise KeysConfigError(f"{self._where}: no key {self._key_id!r} (run `strongroom keys init`)")
        return KeyRef(key_id=self._key_id, version=live[-1])

    def versions(self) -> list[KeyVersionInfo]:
        with self._lock:
            live = self._live_versions()
        current = live[-1] if live else 0
        infos = [
            KeyVersionInfo(ref=KeyRef(key_id=self._key_id, version=v), status=KeyStatus.RETIRED)
            for v in range(1, live[0] if live else 1)
        ]
        for v in live:
            status = KeyStatus.CURRENT if v == current else KeyStatus.PREVIOUS
            pub = self.signing_public_key(self._key_id, v).hex()
            infos.append(
                KeyVersionInfo(
                    ref=KeyRef(key_id=self._key_id, version=v), status=status, signing_public_key=pub
                )
            )
        return infos

    def wrap(self, dek: bytes) -> WrappedKey:
        ref = self.current()
        iv = _crypto.random_bytes(_crypto.NONCE_BYTES)
        with self._lock:
            kek = self._find(ObjectClass.SECRET_KEY, _label(ref.key_id, "kek", ref.version))
            sealed = kek.encrypt(
                dek, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(iv, self._ad(ref), 128)
            )
        return WrappedKey(ref=ref, blob=iv + bytes(sealed))

    @staticmethod
    def _ad(ref: KeyRef) -> bytes:
        return f"strongroom/dek|{ref.key_id}|{ref.version}".encode()

    def unwrap(self, blob: bytes, key_id: str, version: int) -> bytes:
        ref = KeyRef(key_id=key_id, version=version)
        iv, sealed = blob[: _crypto.NONCE_BYTES], blob[_crypto.NONCE_BYTES :]
        with self._lock:
            self._checked(key_id, version)
            kek = self._find(ObjectClass.SECRET_KEY, _label(key_id, "kek", version))
            try:
                dek = kek.decrypt(
                    sealed, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(iv, self._ad(ref), 128)
                )
            except pkcs11.PKCS11Error:
                raise WrongKeyError(f"data key does not unwrap under {ref} in {self._where}") from None
        if len(dek) != _crypto.KEY_BYTES:
            raise WrongKeyError(f"data key unwrapped under {ref} has the wrong length")
        return bytes(dek)

    def sign(self, message: bytes) -> Signature:
        ref = self.current()
        with self._lock:
            key = self._find(ObjectClass.PRIVATE_KEY, _label(ref.key_id, "sign", ref.version))
            value = key.sign(message, mechanism=Mechanism.EDDSA)
        return Signature(ref=ref, value=bytes(value))

    def signing_public_key(self, key_id: str, version: int) -> bytes:
        with self._lock:
            self._checked(key_id, version)
            pub = self._find(ObjectClass.PUBLIC_KEY, _label(key_id, "sign", version))
            return _raw_ec_point(bytes(pub[Attribute.EC_POINT]))

    def rotate(self) -> KeyRef:
        with self._lock:
            live = self._live_versions()
            if not live:
                raise KeysConfigError(f"{self._where}: no key {self._key_id!r} (run `strongroom keys init`)")
            self._generate(live[-1] + 1)
            return KeyRef(key_id=self._key_id, version=live[-1] + 1)

    def retire_before(self, version: int) -> list[KeyRef]:
        retired = []
        with self._lock:
            for v in self._live_versions():
                if v >= version:
                    continue
                for cls, purpose in (
                    (ObjectClass.SECRET_KEY, "kek"),
                    (ObjectClass.PRIVATE_KEY, "sign"),
                    (ObjectClass.PUBLIC_KEY, "sign"),
                ):
                    self._find(cls, _label(self._key_id, purpose, v)).destroy()
                retired.append(KeyRef(key_id=self._key_id, version=v))
        return retired

    def __repr__(self) -> str:
        return f"Pkcs11Provider({self._where}, key_id={self._key_id!r}, pin=<redacted>)"
