"""The keys package's errors. Each names the model/file and the reason, and carries ``status_code``/``code``.

Errors raised while opening or reading a sealed model also subclass the engine's ``ModelLoadError``,
so the engine keeps that one model out of service and goes on serving the others.

The dependency runs one way, keys to engine, and only through the engine's loading seam:
``SealedSource`` is an ``engine.loading.model_source.ModelSource``, whose reads raise
``ModelLoadError``. Those two modules are all of the engine that keys imports, and the engine
never imports keys (import-linter contracts ``layers`` and ``keys-engine-seam``).
"""

from __future__ import annotations

from engine.errors import ModelLoadError


class KeysError(Exception):
    """Base of every keys error."""

    status_code: int = 500
    code: str = "keys_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class KeysConfigError(KeysError):
    """The [keys] configuration or the local key file is unusable (missing, unreadable, too open)."""

    code = "keys_config_invalid"


class KeyProviderUnavailableError(KeysError):
    """The key provider cannot be reached: HSM module missing, token absent, PIN unset or rejected."""

    status_code = 503
    code = "key_provider_unavailable"


class UnknownKeyError(KeysError):
    """The sealed data names a key id or version this provider never had."""

    code = "unknown_key"


class RetiredKeyError(KeysError):
    """The key version was retired by a rotation; data still under it must be rewrapped first."""

    code = "retired_key"


class WrongKeyError(KeysError):
    """The data key did not unwrap: the key material differs from the one that sealed it."""

    code = "wrong_key"


class ExportNotConfirmedError(KeysError):
    """Writing plaintext weights to disk was asked for without the explicit export flag."""

    status_code = 400
    code = "export_not_confirmed"


class AuditRequiredError(KeysError):
    """A key operation could not be audited, so it was not carried out (fail closed)."""

    status_code = 503
    code = "audit_unavailable"


class SealedModelError(KeysError, ModelLoadError):
    """A sealed model cannot be served: the message names the model directory, the file and why."""

    code = "sealed_model_invalid"

    def __init__(self, message: str) -> None:
        KeysError.__init__(self, message)
        self.param = None


class SealedFormatError(SealedModelError):
    """A sealed file's header is malformed: wrong magic, unsupported version, bad lengths."""

    code = "sealed_format_invalid"


class TamperedFileError(SealedModelError):
    """A chunk failed authentication: modified, reordered, truncated, extended or swapped in."""

    code = "sealed_file_tampered"


class ManifestError(SealedModelError):
    """The manifest is missing, malformed, or disagrees with the files on disk."""

    code = "manifest_invalid"


class ManifestSignatureError(ManifestError):
    """The manifest signature does not verify under the provider's signing key."""

    code = "manifest_signature_invalid"


class PlaintextModelError(SealedModelError):
    """``require_sealed`` is on and the model directory is not sealed."""

    code = "model_not_sealed"


class ModelKeyError(SealedModelError):
    """The model's data key could not be obtained (unknown, retired or wrong key, provider down)."""

    code = "model_key_unavailable"


class SealRegistryError(SealedModelError):
    """The seal registry refuses a sealing (unregistered, superseded, renamed) or is itself invalid."""

    code = "seal_registry_refused"


class ModelIdentityError(SealedModelError):
    """A sealed model's bound name differs from the name it is configured to serve under."""

    code = "model_identity_mismatch"
