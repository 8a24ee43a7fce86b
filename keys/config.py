"""The [keys] section: which key provider guards sealed models, and whether plaintext is refused.

Secrets never live here: the passphrase and the HSM PIN are read from the environment variables
named below. Paths are relative to ``data_dir`` unless absolute.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from keys.errors import KeysConfigError


class KeysConfig(msgspec.Struct, frozen=True, kw_only=True):
    provider: Literal["file", "pkcs11"] = "file"
    """Where the master key lives: a local key file, or a PKCS#11 token (HSM)."""
    key_file: str = "keys/master.key"
    """Key file path for provider "file" (created by `strongroom keys init`, mode 0600)."""
    passphrase_env: str | None = None
    """Environment variable holding the key-file passphrase; None means no passphrase, or prompt in the CLI."""
    pkcs11_module: str = "/usr/lib/softhsm/libsofthsm2.so"
    """Path of the PKCS#11 module (the vendor's .so; SoftHSM2's by default)."""
    pkcs11_token_label: str | None = None
    """Label of the token holding the master key; required for provider "pkcs11"."""
    pkcs11_pin_env: str | None = None
    """Environment variable holding the token user PIN; required for provider "pkcs11" (no default PIN)."""
    pkcs11_key_id: str = "strongroom-master"
    """Key id of the master key on the token; object labels are "<key id>/kek/v<N>" and "<key id>/sign/v<N>"."""
    registry_file: str = "keys/sealings.json"
    """Seal registry: every sealing with its version per model, signed with the master key. The
    engine serves only registered sealings that are the newest of their model (or pinned), and
    rotation rewraps every registered model. Engines sharing sealed models share this file."""
    require_sealed: bool = True
    """Refuse to serve plaintext model directories (production default; dev setups may turn it off)."""

    def __post_init__(self) -> None:
        if self.provider == "pkcs11" and (not self.pkcs11_token_label or not self.pkcs11_pin_env):
            raise KeysConfigError("keys.provider = 'pkcs11' needs pkcs11_token_label and pkcs11_pin_env")
        if not self.pkcs11_key_id or "/" in self.pkcs11_key_id:
            raise KeysConfigError("keys.pkcs11_key_id must be non-empty and contain no '/'")
