"""Public AES-256-GCM vectors (McGrew & Viega GCM spec test cases 13-16, as used by NIST CAVP)
for the primitive, and known-answer vectors for our chunk format rebuilt independently."""

from __future__ import annotations

import hashlib
import struct

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from keys._crypto import AuthenticationFailed, Cipher
from keys.chunk_cipher import ChunkCipher
from keys.errors import TamperedFileError
from keys.header import FileHeader
from keys.provider import KeyRef, WrappedKey

K0 = bytes(32)
KF = bytes.fromhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
IV = bytes.fromhex("cafebabefacedbaddecaf888")
P15 = bytes.fromhex(
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
)
C15 = bytes.fromhex(
    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"
)
A16 = bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2")

VECTORS = [
    ("tc13", K0, bytes(12), b"", b"", b"", "530f8afbc74536b9a963b4f1c4cb738b"),
    ("tc14", K0, bytes(12), bytes(16), b"", bytes.fromhex("cea7403d4d606b6e074ec5d3baf39d18"),
     "d0d1c8a799996bf0265b98b5d48ab919"),
    ("tc15", KF, IV, P15, b"", C15, "b094dac5d93471bdec1a502270e3cc6c"),
    ("tc16", KF, IV, P15[:60], A16, C15[:60], "76fc6ece0f4e1768cddf8853bb2d551b"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "key", "iv", "plain", "ad", "ct", "tag"), VECTORS, ids=[v[0] for v in VECTORS]
)
def test_gcm_vectors(name: str, key: bytes, iv: bytes, plain: bytes, ad: bytes, ct: bytes, tag: str) -> None:
    cipher = Cipher(key)
    sealed = cipher.encrypt(iv, plain, ad)
    assert sealed == ct + bytes.fromhex(tag)
    out = bytearray(len(plain))
    cipher.decrypt_into(iv, sealed, ad, memoryview(out))
    assert bytes(out) == plain
    forged = bytearray(sealed)
    forged[-1] ^= 1
    with pytest.raises(AuthenticationFailed):
        cipher.decrypt_into(iv, bytes(forged), ad, memoryview(out))


DEK = bytes(range(32))
SALT = bytes(range(100, 132))
PREFIX = bytes.fromhex("01020304050607")
KAT_SHA256 = "de8330410b3171b1b12ce3949e36373b58f20df23705f05aaa8d496d84657746"
HEADER = FileHeader(
    chunk_size=16,
    salt=SALT,
    nonce_prefix=PREFIX,
    wrapped=WrappedKey(ref=KeyRef(key_id="k", version=1), blob=b""),
)


def _independent_chunk(index: int, last: bool, plain: bytes) -> bytes:
    """The chunk format written out from the docstring, with pyca primitives directly."""
    lp = lambda s: struct.pack(">H", len(s)) + s  # noqa: E731
    key = HKDF(hashes.SHA256(), 32, SALT, b"strongroom/seal/v1" + lp(b"m") + lp(b"s") + lp(b"w.bin")).derive(
        DEK
    )
    nonce = PREFIX + struct.pack(">IB", index, last)
    ad = b"SRSEAL/1" + lp(b"m") + lp(b"s") + lp(b"w.bin") + struct.pack(">QB", index, last)
    return AESGCM(key).encrypt(nonce, plain, ad)


def test_chunk_format_known_answers() -> None:
    cipher = ChunkCipher(DEK, HEADER, model_id="m", seal_id="s", file_name="w.bin", where="m/w.bin")
    chunks = [(0, False, b"A" * 16), (1, False, b"B" * 16), (2, True, b"tail")]
    sealed = b"".join(cipher.encrypt(i, last, p) for i, last, p in chunks)
    assert sealed == b"".join(_independent_chunk(i, last, p) for i, last, p in chunks)
    assert hashlib.sha256(sealed).hexdigest() == KAT_SHA256


def test_chunk_rejects_wrong_index_flag_file_and_model() -> None:
    cipher = ChunkCipher(DEK, HEADER, model_id="m", seal_id="s", file_name="w.bin", where="m/w.bin")
    sealed = memoryview(cipher.encrypt(1, False, b"B" * 16))
    out = memoryview(bytearray(16))
    cipher.decrypt_into(1, False, sealed, out)
    for other, index, last in [
        (cipher, 2, False),
        (cipher, 1, True),
        (ChunkCipher(DEK, HEADER, model_id="m", seal_id="s", file_name="x.bin", where="m/x.bin"), 1, False),
        (ChunkCipher(DEK, HEADER, model_id="m", seal_id="t", file_name="w.bin", where="m/w.bin"), 1, False),
        (ChunkCipher(DEK, HEADER, model_id="n", seal_id="s", file_name="w.bin", where="n/w.bin"), 1, False),
    ]:
        with pytest.raises(TamperedFileError, match="chunk"):
            other.decrypt_into(index, last, sealed, out)


def test_header_round_trip() -> None:
    header = FileHeader(
        chunk_size=1 << 20, salt=SALT, nonce_prefix=PREFIX,
        wrapped=WrappedKey(ref=KeyRef(key_id="k-01", version=7), blob=b"w" * 60),
    )  # fmt: skip
    raw = header.encode()
    decoded, length = FileHeader.decode(raw + b"body", "x")
    assert decoded == header and length == len(raw)
