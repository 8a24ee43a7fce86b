"""AES-256-GCM over fixed-size chunks of one file, in the manner of Tink's streaming AEAD.

Per-file key:   HKDF-SHA256(DEK, salt = file salt,
                            info = "strongroom/seal/v1" | len+model id | len+seal id | len+file name)
Nonce of i:     nonce prefix (7) | i as u32 big-endian (4) | last flag (1)
AD of i:        "SRSEAL/1" | len+model id | len+seal id | len+file name | i as u64 big-endian | last flag (1)

The seal id is random per ``seal_model`` call and sits in the signed manifest, so a file from
another sealing of the same model id (say, older weights) does not decrypt here even though the
same provider unwraps its data key. A chunk moved to another index, file or model, or a truncation
that makes a non-final chunk last (or drops the last one) changes the key, nonce or AD.
"""

from __future__ import annotations

import struct

from keys._crypto import TAG_BYTES, AuthenticationFailed, Cipher, derive_key
from keys.errors import TamperedFileError
from keys.header import FileHeader

_INDEX_AND_LAST = struct.Struct(">QB")
_NONCE_TAIL = struct.Struct(">IB")
MAX_CHUNKS = 1 << 32


def _length_prefixed(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">H", len(raw)) + raw


class ChunkCipher:
    """Encrypts and decrypts the chunks of one sealed file; safe to share between threads."""

    __slots__ = ("_ad_prefix", "_cipher", "_prefix", "chunk_size", "where")

    def __init__(
        self, dek: bytes, header: FileHeader, *, model_id: str, seal_id: str, file_name: str, where: str
    ) -> None:
        binding = _length_prefixed(model_id) + _length_prefixed(seal_id) + _length_prefixed(file_name)
        self._cipher = Cipher(derive_key(dek, salt=header.salt, info=b"strongroom/seal/v1" + binding))
        self._prefix = header.nonce_prefix
        self._ad_prefix = b"SRSEAL/1" + binding
        self.chunk_size = header.chunk_size
        self.where = where

    def _nonce_and_ad(self, index: int, last: bool) -> tuple[bytes, bytes]:
        if index >= MAX_CHUNKS:
            raise TamperedFileError(f"{self.where}: more than 2^32 chunks")
        return self._prefix + _NONCE_TAIL.pack(index, last), self._ad_prefix + _INDEX_AND_LAST.pack(
            index, last
        )

    def encrypt(self, index: int, last: bool, plaintext: bytes | memoryview) -> bytes:
        nonce, ad = self._nonce_and_ad(index, last)
        return self._cipher.encrypt(nonce, plaintext, ad)

    def decrypt_into(self, index: int, last: bool, sealed: memoryview, out: memoryview) -> None:
        nonce, ad = self._nonce_and_ad(index, last)
        try:
            self._cipher.decrypt_into(nonce, sealed, ad, out)
        except AuthenticationFailed:
            raise TamperedFileError(
                f"{self.where}: chunk {index} failed authentication "
                "(modified, reordered, truncated, swapped from another file, or sealed under another key)"
            ) from None

    def __repr__(self) -> str:
        return f"ChunkCipher({self.where!r}, chunk_size={self.chunk_size})"


class ChunkLayout:
    """Where chunk i of a sealed body lies, and how big its plaintext is."""

    __slots__ = ("body_offset", "chunk_size", "num_chunks", "plaintext_size")

    def __init__(self, *, body_offset: int, chunk_size: int, plaintext_size: int) -> None:
        self.body_offset = body_offset
        self.chunk_size = chunk_size
        self.plaintext_size = plaintext_size
        self.num_chunks = max(1, -(-plaintext_size // chunk_size))

    @classmethod
    def for_plaintext(cls, plaintext_size: int, chunk_size: int) -> ChunkLayout:
        return cls(body_offset=0, chunk_size=chunk_size, plaintext_size=plaintext_size)

    @classmethod
    def from_sealed_size(cls, body_offset: int, sealed_size: int, chunk_size: int) -> ChunkLayout | None:
        """The layout implied by the sealed file size, or None if no plaintext size fits it."""
        body = sealed_size - body_offset
        stride = chunk_size + TAG_BYTES
        full, rest = divmod(body, stride)
        if rest == 0 and full >= 1:
            return cls(body_offset=body_offset, chunk_size=chunk_size, plaintext_size=full * chunk_size)
        if rest < TAG_BYTES or (rest == TAG_BYTES and full > 0):
            return None
        return cls(
            body_offset=body_offset,
            chunk_size=chunk_size,
            plaintext_size=full * chunk_size + rest - TAG_BYTES,
        )

    @property
    def sealed_size(self) -> int:
        return self.body_offset + self.plaintext_size + self.num_chunks * TAG_BYTES

    def plain_span(self, index: int) -> tuple[int, int]:
        start = index * self.chunk_size
        return start, min(start + self.chunk_size, self.plaintext_size)

    def sealed_span(self, index: int) -> tuple[int, int]:
        start, end = self.plain_span(index)
        offset = self.body_offset + index * (self.chunk_size + TAG_BYTES)
        return offset, offset + end - start + TAG_BYTES

    def is_last(self, index: int) -> bool:
        return index == self.num_chunks - 1
