"""One file of a sealed model, opened: header parsed, layout checked, data key in hand.

Decryption reads the ciphertext through a read-only mmap and writes plaintext with
``decrypt_into`` straight into the caller's buffer, one segment of chunks per task on a thread
pool; AES-GCM releases the GIL, so the cores decrypt in parallel. Integrity on this path is the
per-chunk AEAD plus the signed digest of all chunk tags; the flat plaintext SHA-256 (a serial pass
slower than decryption) is left to verify_model and unseal_model.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from keys import _crypto
from keys._crypto import TAG_BYTES
from keys.chunk_cipher import ChunkCipher, ChunkLayout
from keys.errors import SealedFormatError, TamperedFileError
from keys.header import MAX_HEADER_BYTES, FileHeader
from keys.manifest import ManifestFile

SEGMENT_BYTES = 8 << 20
"""Plaintext bytes per thread-pool task: large enough to hide task overhead, small enough to spread."""


def read_header(path: Path, where: str) -> tuple[FileHeader, int, int]:
    """The header of a sealed file, its length, and the file's total size."""
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            header, length = FileHeader.decode(stream.read(MAX_HEADER_BYTES), where)
    except FileNotFoundError:
        raise SealedFormatError(f"{where}: sealed file missing ({path.name})") from None
    return header, length, size


class SealedFile:
    """Decrypts one sealed file; immutable after construction, so threads may share it."""

    def __init__(self, path: Path, entry: ManifestFile, cipher: ChunkCipher, layout: ChunkLayout) -> None:
        self.path = path
        self.entry = entry
        self.cipher = cipher
        self.layout = layout

    @classmethod
    def check_layout(
        cls, entry: ManifestFile, header: FileHeader, header_len: int, size: int, where: str
    ) -> ChunkLayout:
        layout = ChunkLayout.from_sealed_size(header_len, size, header.chunk_size)
        if layout is None or layout.plaintext_size != entry.size:
            held = "no whole number of chunks" if layout is None else f"{layout.plaintext_size} bytes"
            raise TamperedFileError(
                f"{where}: sealed body holds {held}, the manifest says {entry.size} (truncated or extended)"
            )
        return layout

    def _segments(self, first: int, stop: int) -> Iterator[tuple[int, int]]:
        per_segment = max(1, SEGMENT_BYTES // self.layout.chunk_size)
        for start in range(first, stop, per_segment):
            yield start, min(stop, start + per_segment)

    def _decrypt_chunks(
        self, sealed: memoryview, first: int, stop: int, out: memoryview, out_base: int
    ) -> None:
        """Chunks [first, stop) into ``out`` (``out[0]`` is plaintext byte ``out_base``)."""
        layout = self.layout
        for index in range(first, stop):
            lo, hi = layout.sealed_span(index)
            plain_lo, plain_hi = layout.plain_span(index)
            self.cipher.decrypt_into(
                index, layout.is_last(index), sealed[lo:hi], out[plain_lo - out_base : plain_hi - out_base]
            )

    def check_tags(self, sealed: memoryview) -> None:
        """Compare the SHA-256 of all chunk tags with the signed manifest (binds ciphertext to signature)."""
        digest = _crypto.sha256()
        for index in range(self.layout.num_chunks):
            end = self.layout.sealed_span(index)[1]
            digest.update(sealed[end - TAG_BYTES : end])
        if not _crypto.constant_time_equal(digest.hexdigest().encode(), self.entry.tags_sha256.encode()):
            raise TamperedFileError(f"{self.cipher.where}: chunk tags differ from the signed manifest")

    def decrypt(
        self, out: memoryview, *, first: int, stop: int, pool: ThreadPoolExecutor | None, verify_digest: bool
    ) -> None:
        """Decrypt chunks [first, stop) into ``out`` (which starts at chunk ``first``).

        With ``verify_digest`` the tag digest is checked against the signed manifest first.
        """
        out_base = first * self.layout.chunk_size
        with open(self.path, "rb") as stream:
            mapped = mmap.mmap(
                stream.fileno(), 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ
            )
        try:
            sealed = memoryview(mapped)
            if verify_digest:
                self.check_tags(sealed)
            segments = list(self._segments(first, stop))
            if pool is None or len(segments) == 1:
                for a, b in segments:
                    self._decrypt_chunks(sealed, a, b, out, out_base)
            else:
                futures = [
                    pool.submit(self._decrypt_chunks, sealed, a, b, out, out_base) for a, b in segments
                ]
                try:
                    for future in futures:
                        future.result()
                finally:
                    for future in futures:
                        future.cancel()
                    wait(futures)
            sealed.release()
        finally:
            # A failed chunk's slice may still be referenced by a traceback; GC unmaps it then.
            with contextlib.suppress(BufferError):
                mapped.close()

    def segments(self) -> Iterator[tuple[int, int]]:
        return self._segments(0, self.layout.num_chunks)
