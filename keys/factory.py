"""``build_provider``: the KeyProvider the [keys] config names."""

from __future__ import annotations

from pathlib import Path

from keys.config import KeysConfig
from keys.errors import KeysConfigError
from keys.key_file_provider import KeyFileProvider
from keys.pkcs11_provider import Pkcs11Provider
from keys.provider import KeyProvider
from keys.seal_registry import SealRegistry
from keys.secret import Secret


def _resolve(name: str, data_dir: str | Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() else Path(data_dir) / path


def key_file_path(config: KeysConfig, data_dir: str | Path) -> Path:
    return _resolve(config.key_file, data_dir)


def seal_registry(config: KeysConfig, data_dir: str | Path, provider: KeyProvider) -> SealRegistry:
    """The configured seal registry, verified with ``provider``'s signing keys."""
    return SealRegistry(_resolve(config.registry_file, data_dir), provider)


def build_provider(
    config: KeysConfig, data_dir: str | Path, *, passphrase: Secret | None = None
) -> KeyProvider:
    """Load the configured provider. ``passphrase`` overrides ``passphrase_env`` (the CLI's prompt)."""
    if config.provider == "file":
        if passphrase is None and config.passphrase_env:
            passphrase = Secret.from_env(config.passphrase_env)
        return KeyFileProvider.load(key_file_path(config, data_dir), passphrase=passphrase)
    if config.pkcs11_token_label is None or config.pkcs11_pin_env is None:
        raise KeysConfigError("keys.provider = 'pkcs11' needs pkcs11_token_label and pkcs11_pin_env")
    pin = Secret.from_env(config.pkcs11_pin_env)
    return Pkcs11Provider.connect(config.pkcs11_module, config.pkcs11_token_label, pin, config.pkcs11_key_id)
