"""``SealedSource``: a ModelSource over a sealed model directory, decrypting in memory only.

Opening (``open_model``) verifies the manifest signature, parses every header, checks every
file's size against the manifest and unwraps the data key, so a bad model fails at open, before
it is served. Reads then decrypt into fresh buffers (or the caller's, e.g. pinned memory).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from keys.errors import SealedModelError
from keys.manifest import Manifest
from keys.provider import KeyRef
from keys.sealed_file import SealedFile


def default_threads() -> int:
    return max(1, min(32, os.cpu_count() or 1))


class SealedSource:
    """Read-only plaintext view of a sealed model. Implements engine.loading.model_source.ModelSource."""

    def __init__(
        self,
        path: Path,
        manifest: Manifest,
        files: dict[str, SealedFile],
        signer: KeyRef,
        key: KeyRef,
        *,
        manifest_sha256: str,
    ) -> None:
        self._path = path
        self.manifest_sha256 = manifest_sha256
        """Hex SHA-256 of manifest.json's bytes: this sealing's identity in inference records."""
        self._files = files
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.manifest = manifest
        self.signer = signer
        self.key = key

    @property
    def name(self) -> str:
        return str(self._path)

    @property
    def model_id(self) -> str:
        return self.manifest.model_id

    def names(self) -> list[str]:
        return sorted(self._files)

    def size(self, name: str) -> int:
        return self.sealed_file(name).entry.size

    def sealed_file(self, name: str) -> SealedFile:
        """The opened sealed file behind ``name`` (for verify/unseal, which stream it)."""
        if self._closed:
            raise SealedModelError(f"{self._path}: source is closed")
        file = self._files.get(name)
        if file is None:
            raise SealedModelError(f"{self._path}: missing file {name}")
        return file

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(default_threads(), thread_name_prefix="keys-decrypt")
        return self._pool

    def read(self, name: str) -> bytearray:
        """The whole plaintext of ``name``, its SHA-256 checked against the signed manifest."""
        file = self.sealed_file(name)
        out = bytearray(file.entry.size)
        self.read_into(name, memoryview(out))
        return out

    def read_into(self, name: str, out: memoryview) -> None:
        """Decrypt the whole of ``name`` into ``out`` (exactly ``size(name)`` writable bytes; pinned is fine)."""
        file = self.sealed_file(name)
        view = out.cast("B") if out.format != "B" or out.ndim != 1 else out
        if view.readonly or len(view) != file.entry.size:
            raise ValueError(f"read_into needs {file.entry.size} writable bytes, got {len(view)}")
        file.decrypt(view, first=0, stop=file.layout.num_chunks, pool=self._executor(), verify_digest=True)

    def read_range(self, name: str, offset: int, length: int) -> memoryview:
        """Plaintext bytes [offset, offset + length) of ``name``, decrypting only the chunks they touch.

        For tensor-parallel ranks. Every chunk read is authenticated (AEAD, bound to model, file and
        index); the whole-file SHA-256 is checked only by ``read``/``read_into`` and ``verify_model``.
        """
        file = self.sealed_file(name)
        if offset < 0 or length < 0 or offset + length > file.entry.size:
            raise ValueError(f"range {offset}+{length} outside {name} ({file.entry.size} bytes)")
        if length == 0:
            return memoryview(bytearray())
        chunk = file.layout.chunk_size
        first, stop = offset // chunk, (offset + length - 1) // chunk + 1
        span_end = file.layout.plain_span(stop - 1)[1]
        buf = bytearray(span_end - first * chunk)
        file.decrypt(memoryview(buf), first=first, stop=stop, pool=self._executor(), verify_digest=False)
        start = offset - first * chunk
        return memoryview(buf)[start : start + length]

    def close(self) -> None:
        """Drop the per-file ciphers and stop the decrypt threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._files = {}
        self._closed = True

    def __enter__(self) -> SealedSource:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SealedSource({str(self._path)!r}, model_id={self.model_id!r}, files={len(self._files)}, key={self.key})"

    def __reduce__(self) -> NoReturn:
        # Its ciphers hold keys derived from the data key: another process opens the model itself
        # (engine.loading.source_opener), it is never handed this one.
        raise TypeError("SealedSource cannot be pickled: it holds the data key")
