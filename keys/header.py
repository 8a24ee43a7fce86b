"""The header at the front of every sealed file (layout in the keys package docstring).

The header is not itself covered by a tag: each field is bound another way. Salt and nonce prefix
feed the per-file key and nonces, chunk size fixes the chunk boundaries, and the key reference and
wrapped data key must unwrap to a key under which every chunk authenticates. Rotation rewrites
only the key reference and the wrapped key, which is why those stay outside the chunk AD.
"""

from __future__ import annotations

import struct

import msgspec

from keys._crypto import MAX_CALL_BYTES, TAG_BYTES
from keys.errors import SealedFormatError
from keys.provider import KeyRef, WrappedKey

MAGIC = b"SRSEAL"
FORMAT_VERSION = 1
SALT_BYTES = 32
NONCE_PREFIX_BYTES = 7
_FIXED = struct.Struct(
    ">6sBBII32s7sB"
)  # magic, version, flags, header len, chunk size, salt, prefix, key id len
_VERSION_AND_WRAPPED_LEN = struct.Struct(">IH")
MAX_HEADER_BYTES = 4096
MAX_CHUNK_SIZE = MAX_CALL_BYTES - TAG_BYTES


class FileHeader(msgspec.Struct, frozen=True, kw_only=True):
    chunk_size: int
    """Plaintext bytes per chunk; every chunk but the last is full."""
    salt: bytes
    nonce_prefix: bytes
    wrapped: WrappedKey

    def __repr__(self) -> str:
        return f"FileHeader(chunk_size={self.chunk_size}, key={self.wrapped.ref})"

    def encode(self) -> bytes:
        key_id = self.wrapped.ref.key_id.encode()
        length = _FIXED.size + len(key_id) + _VERSION_AND_WRAPPED_LEN.size + len(self.wrapped.blob)
        fixed = _FIXED.pack(
            MAGIC, FORMAT_VERSION, 0, length, self.chunk_size, self.salt, self.nonce_prefix, len(key_id)
        )
        tail = _VERSION_AND_WRAPPED_LEN.pack(self.wrapped.ref.version, len(self.wrapped.blob))
        return fixed + key_id + tail + self.wrapped.blob

    def with_wrapped(self, wrapped: WrappedKey) -> FileHeader:
        return FileHeader(
            chunk_size=self.chunk_size, salt=self.salt, nonce_prefix=self.nonce_prefix, wrapped=wrapped
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, where: str) -> tuple[FileHeader, int]:
        """Parse the header at the start of ``data``; returns it and its length in bytes."""
        if len(data) < _FIXED.size:
            raise SealedFormatError(f"{where}: too short to hold a sealed-file header")
        magic, version, flags, length, chunk_size, salt, prefix, id_len = _FIXED.unpack_from(data)
        if magic != MAGIC:
            raise SealedFormatError(f"{where}: not a sealed file (bad magic)")
        if version != FORMAT_VERSION or flags != 0:
            raise SealedFormatError(f"{where}: unsupported sealed format version {version} (flags {flags})")
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise SealedFormatError(f"{where}: invalid chunk size {chunk_size}")
        id_end = _FIXED.size + id_len
        if length > MAX_HEADER_BYTES or len(data) < length or id_end + _VERSION_AND_WRAPPED_LEN.size > length:
            raise SealedFormatError(f"{where}: header length {length} is inconsistent")
        try:
            key_id = bytes(data[_FIXED.size : id_end]).decode("ascii")
        except UnicodeDecodeError:
            raise SealedFormatError(f"{where}: key id is not ASCII") from None
        key_version, wrapped_len = _VERSION_AND_WRAPPED_LEN.unpack_from(data, id_end)
        blob_start = id_end + _VERSION_AND_WRAPPED_LEN.size
        if blob_start + wrapped_len != length:
            raise SealedFormatError(f"{where}: wrapped key length {wrapped_len} disagrees with header length")
        wrapped = WrappedKey(
            ref=KeyRef(key_id=key_id, version=key_version), blob=bytes(data[blob_start:length])
        )
        return cls(chunk_size=chunk_size, salt=salt, nonce_prefix=prefix, wrapped=wrapped), length
