"""The audit signing key inside a PKCS#11 token (an HSM; SoftHSM2 in tests).

Checkpoints are signed in the token, so the private key never reaches a gateway's memory or
disk, and every gateway that logs in to the token (or to one HSM cluster) signs with the same
key: the checkpoint chain several gateways write together verifies under one public key. The
key is the Ed25519 "sign" pair of ``audit.signing_pkcs11_key_id`` on the token, labelled as
``keys/pkcs11_provider.py`` describes; its key-encryption key is created alongside and unused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit.config import AuditConfig
from audit.errors import AuditConfigError

if TYPE_CHECKING:  # python-pkcs11 is imported only when a token is configured
    from keys.pkcs11_provider import Pkcs11Provider


class TokenSigningKey:
    """Satisfies ``audit.signer.SigningKey``; pinned to the key version current when opened."""

    def __init__(self, provider: Pkcs11Provider) -> None:
        self._provider = provider
        self._ref = provider.current()
        raw = provider.signing_public_key(self._ref.key_id, self._ref.version)
        self._public_key = Ed25519PublicKey.from_public_bytes(raw)

    def __repr__(self) -> str:
        return f"TokenSigningKey({self._ref})"

    @classmethod
    def connect(cls, cfg: AuditConfig) -> TokenSigningKey:
        """Log in with the PIN from ``cfg.signing_pkcs11_pin_env``; create the key in dev mode."""
        from keys.errors import KeysError
        from keys.pkcs11_provider import Pkcs11Provider
        from keys.secret import Secret

        assert cfg.signing_pkcs11_token_label is not None and cfg.signing_pkcs11_pin_env is not None
        try:
            pin = Secret.from_env(cfg.signing_pkcs11_pin_env)
            provider = Pkcs11Provider.connect(
                cfg.signing_pkcs11_module, cfg.signing_pkcs11_token_label, pin, cfg.signing_pkcs11_key_id
            )
            if not provider.versions():
                if not cfg.create_signing_key:
                    raise AuditConfigError(
                        f"no audit signing key {cfg.signing_pkcs11_key_id!r} on token "
                        f"{cfg.signing_pkcs11_token_label!r} (create it once, e.g. one start with "
                        "audit.create_signing_key = true, then pin its public key)"
                    )
                provider.initialize()
            return cls(provider)
        except KeysError as exc:
            raise AuditConfigError(f"audit signing key unavailable: {exc}") from None

    def sign(self, data: bytes) -> bytes:
        signature = self._provider.sign(data)
        if signature.ref != self._ref:
            # A checkpoint under another key would break the chain for every verifier.
            raise AuditConfigError(f"audit signing key changed on the token ({self._ref} -> {signature.ref})")
        return signature.value

    def public_key(self) -> Ed25519PublicKey:
        return self._public_key
