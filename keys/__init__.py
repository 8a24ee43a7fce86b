"""Sealed models: weights encrypted at rest, keys in an HSM or an operator's key file.

A sealed model directory holds ``<name>.sealed`` for every file of the plaintext checkpoint,
plus ``manifest.json`` (every file's plaintext size and SHA-256, the model id, the chunk size)
and ``manifest.sig`` (Ed25519 over manifest.json's exact bytes, by the master key version named
in it). One random 256-bit data key (DEK) per model, wrapped by the KeyProvider; per-file keys
come from the DEK through HKDF with the file's salt, model id and file name.

Sealed file (big-endian integers):

    0       6   magic "SRSEAL"
    6       1   format version = 1
    7       1   flags = 0
    8       4   header length H
    12      4   chunk size C (plaintext bytes per chunk)
    16      32  file salt            -> HKDF salt of the per-file key
    48      7   nonce prefix         -> first 7 bytes of every chunk nonce
    55      1   key id length K
    56      K   key id (ASCII)       \\
    56+K    4   key version           > rewritten by rotation (same length), nothing else is
    60+K    2   wrapped DEK length W  |
    62+K    W   wrapped DEK          /
    H       chunk 0:   AES-256-GCM(min(C, rest) bytes) | 16-byte tag
            chunk 1 ... chunk n-1 (the only chunk that may be short; an empty file has one empty chunk)

    nonce(i) = prefix(7) | i:u32 | last:u8
    AD(i)    = "SRSEAL/1" | len:u16 model id | len:u16 seal id | len:u16 file name | i:u64 | last:u8
    file key = HKDF-SHA256(DEK, salt = file salt, info = "strongroom/seal/v1" | the same three fields)
    (seal id: random per sealing, in the signed manifest)

Flipped bits, reordered or swapped chunks, truncation at a chunk boundary (a non-final chunk would
have to claim last = 1), extension, and headers or chunks moved between files or models all fail a
tag, a size check against the signed manifest, or the data-key unwrap.

Verbs: ``seal_model``, ``verify_model``, ``open_model`` (a ModelSource decrypting in memory,
chunks in parallel threads into pre-allocated buffers), ``rotate``, ``unseal_model`` (export only),
``is_sealed`` and ``model_source`` (what the engine calls; refuses plaintext when require_sealed, a
sealing bound to another name, and one the ``SealRegistry`` does not hold as its model's newest).
"""

from __future__ import annotations

from keys.config import KeysConfig
from keys.errors import (
    AuditRequiredError,
    ExportNotConfirmedError,
    KeyProviderUnavailableError,
    KeysConfigError,
    KeysError,
    ManifestError,
    ManifestSignatureError,
    ModelIdentityError,
    ModelKeyError,
    PlaintextModelError,
    RetiredKeyError,
    SealedFormatError,
    SealedModelError,
    SealRegistryError,
    TamperedFileError,
    UnknownKeyError,
    WrongKeyError,
)
from keys.factory import build_provider, key_file_path, seal_registry
from keys.key_file_provider import KeyFileProvider
from keys.pkcs11_provider import Pkcs11Provider
from keys.provider import KeyProvider, KeyRef, KeyStatus, KeyVersionInfo, Signature, WrappedKey
from keys.report import FileReport, ManifestReport, RotationReport
from keys.rotation import rotate
from keys.seal_registry import Sealing, SealRegistry
from keys.sealed_model import (
    admission,
    is_sealed,
    model_source,
    open_model,
    open_model_async,
    unseal_model,
    verify_model,
)
from keys.sealed_source import SealedSource
from keys.sealer import DEFAULT_CHUNK_SIZE, seal_model
from keys.secret import Secret

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "AuditRequiredError",
    "ExportNotConfirmedError",
    "FileReport",
    "KeyFileProvider",
    "KeyProvider",
    "KeyProviderUnavailableError",
    "KeyRef",
    "KeyStatus",
    "KeyVersionInfo",
    "KeysConfig",
    "KeysConfigError",
    "KeysError",
    "ManifestError",
    "ManifestReport",
    "ManifestSignatureError",
    "ModelIdentityError",
    "ModelKeyError",
    "Pkcs11Provider",
    "PlaintextModelError",
    "RetiredKeyError",
    "RotationReport",
    "SealRegistry",
    "SealRegistryError",
    "SealedFormatError",
    "SealedModelError",
    "SealedSource",
    "Sealing",
    "Secret",
    "Signature",
    "TamperedFileError",
    "UnknownKeyError",
    "WrappedKey",
    "WrongKeyError",
    "admission",
    "build_provider",
    "is_sealed",
    "key_file_path",
    "model_source",
    "open_model",
    "open_model_async",
    "rotate",
    "seal_model",
    "seal_registry",
    "unseal_model",
    "verify_model",
]
