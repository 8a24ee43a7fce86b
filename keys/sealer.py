"""``seal_model``: a plaintext model (a directory, or files held in memory) in, a sealed directory out.

Output appears atomically: everything is written to a sibling staging directory that is renamed
onto ``dst_dir`` only after manifest.sig, the last file, is on disk.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from keys import _crypto
from keys.chunk_cipher import ChunkCipher, ChunkLayout
from keys.errors import KeysError
from keys.header import MAX_CHUNK_SIZE, NONCE_PREFIX_BYTES, SALT_BYTES, FileHeader
from keys.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    Manifest,
    ManifestFile,
    check_file_name,
    encode_signature,
)
from keys.progress import ByteCounter, Progress
from keys.provider import KeyProvider, WrappedKey
from keys.seal_registry import SealRegistry

DEFAULT_CHUNK_SIZE = 1 << 20
PlaintextFiles = Mapping[str, bytes | bytearray | memoryview]


def _chunks_of_buffer(data: memoryview, layout: ChunkLayout) -> Iterator[memoryview]:
    for index in range(layout.num_chunks):
        start, end = layout.plain_span(index)
        yield data[start:end]


def _chunks_of_file(stream: BinaryIO, layout: ChunkLayout, where: str) -> Iterator[bytes]:
    for index in range(layout.num_chunks):
        start, end = layout.plain_span(index)
        chunk = stream.read(end - start)
        if len(chunk) != end - start:
            raise KeysError(f"{where}: file changed size while being sealed")
        yield chunk
    if stream.read(1):
        raise KeysError(f"{where}: file changed size while being sealed")


def _write_sealed(
    out: BinaryIO,
    chunks: Iterator[bytes | memoryview],
    layout: ChunkLayout,
    cipher: ChunkCipher,
    header: bytes,
    counter: ByteCounter,
) -> tuple[str, str]:
    digest, tags = _crypto.sha256(), _crypto.sha256()
    out.write(header)
    for index, chunk in enumerate(chunks):
        counter.add(len(chunk))
        digest.update(chunk)
        sealed = cipher.encrypt(index, layout.is_last(index), chunk)
        tags.update(sealed[-_crypto.TAG_BYTES :])
        out.write(sealed)
    return digest.hexdigest(), tags.hexdigest()


def _source_files(src: str | Path | PlaintextFiles) -> list[str]:
    if isinstance(src, Mapping):
        return sorted(src)
    root = Path(src)
    if not root.is_dir():
        raise KeysError(f"{root}: model directory not found")
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _total_size(src: str | Path | PlaintextFiles, names: list[str]) -> int:
    if isinstance(src, Mapping):
        return sum(memoryview(src[name]).nbytes for name in names)
    return sum((Path(src) / name).stat().st_size for name in names)


def _seal_one(
    src: str | Path | PlaintextFiles,
    name: str,
    staging: Path,
    *,
    dek: bytes,
    wrapped: WrappedKey,
    model_id: str,
    seal_id: str,
    chunk_size: int,
    counter: ByteCounter,
) -> ManifestFile:
    where = f"{model_id}/{name}"
    header = FileHeader(
        chunk_size=chunk_size,
        salt=_crypto.random_bytes(SALT_BYTES),
        nonce_prefix=_crypto.random_bytes(NONCE_PREFIX_BYTES),
        wrapped=wrapped,
    )
    cipher = ChunkCipher(dek, header, model_id=model_id, seal_id=seal_id, file_name=name, where=where)
    target = staging / ManifestFile(name=name, size=0, sha256="", tags_sha256="").sealed_name
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as out:
        if isinstance(src, Mapping):
            data = memoryview(src[name]).cast("B")
            layout = ChunkLayout.for_plaintext(len(data), chunk_size)
            chunks = _chunks_of_buffer(data, layout)
            sha, tags = _write_sealed(out, chunks, layout, cipher, header.encode(), counter)
        else:
            with open(Path(src) / name, "rb") as stream:
                layout = ChunkLayout.for_plaintext(os.fstat(stream.fileno()).st_size, chunk_size)
                sha, tags = _write_sealed(
                    out, _chunks_of_file(stream, layout, where), layout, cipher, header.encode(), counter
                )
        out.flush()
        os.fsync(out.fileno())
    return ManifestFile(name=name, size=layout.plaintext_size, sha256=sha, tags_sha256=tags)


def seal_model(
    src: str | Path | PlaintextFiles,
    dst_dir: str | Path,
    model_id: str,
    provider: KeyProvider,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    clock: Callable[[], float] = time.time,
    registry: SealRegistry | None = None,
    sealed_by: str = "",
    progress: Progress | None = None,
) -> Manifest:
    """Seal every file of ``src`` into ``dst_dir`` under one fresh data key wrapped by ``provider``.

    ``src`` is a plaintext directory or a mapping of relative names to contents (so a builder can
    write a model sealed without its plaintext ever reaching the disk). ``dst_dir`` must not exist
    or be empty. ``chunk_size`` only changes the layout (tests use small ones), not the security.
    With ``registry`` the new sealing is registered as the newest version of ``model_id``
    (``sealed_by`` names the operator), which serving and rotation require. ``progress`` is told
    the plaintext bytes sealed so far after each chunk.
    """
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise KeysError(f"chunk size must be between 1 and {MAX_CHUNK_SIZE} bytes")
    if not model_id:
        raise KeysError("model id must not be empty")
    dst = Path(dst_dir)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise KeysError(f"{dst}: exists and is not an empty directory")
    names = _source_files(src)
    for name in names:
        check_file_name(name, str(src) if not isinstance(src, Mapping) else model_id)
    staging = dst.with_name(f".{dst.name}.sealing-{_crypto.random_bytes(4).hex()}")
    staging.mkdir(parents=True, mode=0o700)
    try:
        counter = ByteCounter(_total_size(src, names), progress)
        dek = _crypto.random_bytes(_crypto.KEY_BYTES)
        seal_id = _crypto.random_bytes(16).hex()
        wrapped = provider.wrap(dek)
        files = tuple(
            _seal_one(
                src,
                name,
                staging,
                dek=dek,
                wrapped=wrapped,
                model_id=model_id,
                seal_id=seal_id,
                chunk_size=chunk_size,
                counter=counter,
            )
            for name in names
        )
        created = datetime.fromtimestamp(clock(), UTC).isoformat(timespec="seconds")
        manifest = Manifest(
            format=MANIFEST_FORMAT,
            model_id=model_id,
            seal_id=seal_id,
            created_at=created,
            chunk_size=chunk_size,
            files=files,
        )
        raw = manifest.encode()
        (staging / MANIFEST_NAME).write_bytes(raw)
        (staging / SIGNATURE_NAME).write_bytes(encode_signature(provider.sign(raw)))
        if dst.exists():
            dst.rmdir()
        staging.rename(dst)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if registry is not None:
        registry.register(model_id, seal_id, hashlib.sha256(raw).hexdigest(), dst, sealed_by)
    return manifest
