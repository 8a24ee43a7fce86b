"""The verbs on a sealed model directory: is it sealed, open it, verify it, export it.

Every data-key unwrap produces a KEY_OPERATION audit event (key id, version, model, process; no
material). ``open_model`` and ``verify_model`` are synchronous and deliver the events with
``asyncio.run``; inside a running event loop use ``open_model_async``, which awaits the sink.
"""

from __future__ import annotations

import asyncio
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from common.audit_event import AuditEvent
from common.audit_sink import AuditSink
from engine.loading.model_source import DirectorySource, ModelSource
from keys import _crypto
from keys.chunk_cipher import ChunkCipher
from keys.config import KeysConfig
from keys.errors import (
    ExportNotConfirmedError,
    KeysError,
    ModelIdentityError,
    ModelKeyError,
    PlaintextModelError,
    SealedFormatError,
    TamperedFileError,
)
from keys.key_audit import key_event, record_all
from keys.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest, ManifestFile, read_verified_manifest
from keys.progress import ByteCounter, Progress
from keys.provider import KeyProvider, KeyRef
from keys.report import FileReport, ManifestReport
from keys.seal_registry import SealRegistry
from keys.sealed_file import SealedFile, read_header
from keys.sealed_source import SealedSource


def is_sealed(model_dir: str | Path) -> bool:
    """True if ``model_dir`` looks sealed (has a manifest and its signature); verification is separate."""
    path = Path(model_dir)
    return (path / MANIFEST_NAME).is_file() and (path / SIGNATURE_NAME).is_file()


def _open_files(
    path: Path, manifest: Manifest, provider: KeyProvider, process: str, events: list[AuditEvent]
) -> tuple[dict[str, SealedFile], KeyRef]:
    """Open every file; appends one audit event per unwrap (failed ones too) to ``events``."""
    deks: dict[tuple[KeyRef, bytes], bytes] = {}
    files: dict[str, SealedFile] = {}
    key = provider.current()
    for entry in manifest.files:
        where = f"{path}/{entry.sealed_name}"
        header, header_len, size = read_header(path / entry.sealed_name, where)
        if header.chunk_size != manifest.chunk_size:
            raise SealedFormatError(f"{where}: chunk size {header.chunk_size} differs from the manifest's")
        layout = SealedFile.check_layout(entry, header, header_len, size, where)
        ref = header.wrapped.ref
        cache_key = (ref, header.wrapped.blob)
        if cache_key not in deks:
            try:
                deks[cache_key] = provider.unwrap(header.wrapped.blob, ref.key_id, ref.version)
            except KeysError as exc:
                events.append(key_event("unwrap", ref, model=manifest.model_id, process=process,
                                        provider=provider.kind, error=type(exc).__name__))  # fmt: skip
                raise ModelKeyError(f"{where}: data key unavailable: {exc.message}") from exc
            events.append(
                key_event("unwrap", ref, model=manifest.model_id, process=process, provider=provider.kind)
            )
            key = ref
        cipher = ChunkCipher(
            deks[cache_key],
            header,
            model_id=manifest.model_id,
            seal_id=manifest.seal_id,
            file_name=entry.name,
            where=where,
        )
        files[entry.name] = SealedFile(path / entry.sealed_name, entry, cipher, layout)
    return files, key


Admission = Callable[[Manifest, str, str], None]
"""Called with (manifest, manifest SHA-256, where) after the signature checks and before any data
key is unwrapped; raises to refuse the sealing (name binding, seal registry)."""


def _prepare(
    model_dir: str | Path, provider: KeyProvider, process: str, admit: Admission | None = None
) -> tuple[SealedSource, list[AuditEvent]]:
    path = Path(model_dir)
    manifest, signer, digest = read_verified_manifest(path, provider)
    if admit is not None:
        admit(manifest, digest, str(path))
    events: list[AuditEvent] = []
    try:
        files, key = _open_files(path, manifest, provider, process, events)
    except ModelKeyError as exc:
        exc.audit_events = events  # type: ignore[attr-defined]
        raise
    return SealedSource(path, manifest, files, signer, key, manifest_sha256=digest), events


async def open_model_async(
    model_dir: str | Path,
    provider: KeyProvider,
    *,
    audit: AuditSink | None,
    process: str,
    admit: Admission | None = None,
) -> SealedSource:
    """Verify and open a sealed model for serving; every unwrap is audited before the source is returned."""
    try:
        source, events = await asyncio.to_thread(_prepare, model_dir, provider, process, admit)
    except ModelKeyError as exc:
        await record_all(audit, getattr(exc, "audit_events", []))
        raise
    try:
        await record_all(audit, events)
    except BaseException:
        source.close()
        raise
    return source


def open_model(
    model_dir: str | Path,
    provider: KeyProvider,
    *,
    audit: AuditSink | None,
    process: str,
    admit: Admission | None = None,
) -> SealedSource:
    """Synchronous ``open_model_async``, for callers with no running event loop in this thread."""
    return asyncio.run(open_model_async(model_dir, provider, audit=audit, process=process, admit=admit))


def admission(sealed_as: str, registry: SealRegistry | None) -> Admission:
    """Serve a sealing only under the name it was sealed as and, with a registry, only if registered
    and not superseded by a newer sealing of that model (unless pinned)."""

    def admit(manifest: Manifest, digest: str, where: str) -> None:
        if manifest.model_id != sealed_as:
            raise ModelIdentityError(
                f"{where}: sealed as {manifest.model_id!r}, configured to serve {sealed_as!r}; refused "
                "(directories swapped? set sealed_model_id in the model's config if this is intended)"
            )
        if registry is not None:
            registry.check(manifest.model_id, manifest.seal_id, digest, where)

    return admit


def model_source(
    model_dir: str | Path,
    config: KeysConfig,
    provider: KeyProvider | None,
    *,
    audit: AuditSink | None,
    process: str,
    sealed_as: str,
    registry: SealRegistry | None = None,
) -> ModelSource:
    """The engine's entry: a SealedSource if sealed; plaintext only when ``require_sealed`` is off.

    ``sealed_as`` is the model id the sealing must be bound to (the configured name unless the
    model's config says otherwise)."""
    if is_sealed(model_dir):
        if provider is None:
            raise ModelKeyError(f"{model_dir}: sealed model but no key provider is configured")
        admit = admission(sealed_as, registry)
        return open_model(model_dir, provider, audit=audit, process=process, admit=admit)
    if config.require_sealed:
        raise PlaintextModelError(f"{model_dir}: model is not sealed and keys.require_sealed is on; refused")
    return DirectorySource(model_dir)


def verify_model(
    model_dir: str | Path,
    provider: KeyProvider,
    *,
    audit: AuditSink | None = None,
    process: str = "verify",
    admit: Admission | None = None,
    progress: Progress | None = None,
) -> ManifestReport:
    """Check signature, headers, every chunk's tag and every file's SHA-256; decrypts in a bounded buffer.

    With ``admit`` (see ``admission``) also the name binding and the seal registry, as serving would.
    ``progress`` is told the plaintext bytes checked so far after each segment."""
    with open_model(model_dir, provider, audit=audit, process=process, admit=admit) as source:
        reports = []
        files = [source.sealed_file(name) for name in source.names()]
        counter = ByteCounter(sum(file.entry.size for file in files), progress)
        for file in files:
            name = file.entry.name
            _stream_file(file, None, counter)
            reports.append(FileReport(name=name, size=file.entry.size, sha256=file.entry.sha256))
        return ManifestReport(
            model_id=source.model_id, key=source.key, signer=source.signer, files=tuple(reports),
            total_bytes=sum(r.size for r in reports), manifest_sha256=source.manifest_sha256,
        )  # fmt: skip


def _stream_file(file: SealedFile, sink: int | None, counter: ByteCounter | None = None) -> None:
    """Decrypt segment by segment (memory bounded), check tags and SHA-256, write to fd ``sink`` if given."""
    with (
        open(file.path, "rb") as stream,
        mmap.mmap(stream.fileno(), 0, prot=mmap.PROT_READ) as mapped,
        memoryview(mapped) as sealed,
    ):
        file.check_tags(sealed)
    digest = _crypto.sha256()
    buf = bytearray()
    layout = file.layout
    for first, stop in file.segments():
        lo, hi = layout.plain_span(first)[0], layout.plain_span(stop - 1)[1]
        if len(buf) < hi - lo:
            buf = bytearray(hi - lo)
        view = memoryview(buf)[: hi - lo]
        file.decrypt(view, first=first, stop=stop, pool=None, verify_digest=False)
        digest.update(view)
        if counter is not None:
            counter.add(hi - lo)
        while sink is not None and view:
            view = view[os.write(sink, view) :]
    if not _crypto.constant_time_equal(digest.hexdigest().encode(), file.entry.sha256.encode()):
        raise TamperedFileError(f"{file.cipher.where}: plaintext SHA-256 differs from the signed manifest")


def unseal_model(
    model_dir: str | Path,
    dst_dir: str | Path,
    provider: KeyProvider,
    *,
    export: bool = False,
    audit: AuditSink | None = None,
    process: str = "unseal",
    progress: Progress | None = None,
) -> ManifestReport:
    """Write the plaintext model to ``dst_dir``. Plaintext on disk is the point, so ``export=True`` is required.

    ``progress`` is told plaintext bytes checked, then written: its total is twice the model's size."""
    if not export:
        raise ExportNotConfirmedError(
            "unsealing writes plaintext weights to disk; pass export=True to confirm"
        )
    dst = Path(dst_dir)
    if dst.exists() and any(dst.iterdir()):
        raise KeysError(f"{dst}: exists and is not empty")
    checked = None if progress is None else (lambda done, total: progress(done, 2 * total))
    report = verify_model(model_dir, provider, audit=audit, process=process, progress=checked)
    counter = ByteCounter(2 * report.total_bytes, progress)
    counter.done = report.total_bytes
    with open_model(model_dir, provider, audit=audit, process=process) as source:
        asyncio.run(record_all(audit, [key_event("export", source.key, model=source.model_id, process=process,
                                                 provider=provider.kind)]))  # fmt: skip
        for name in source.names():
            target = dst / name
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _stream_file(source.sealed_file(name), fd, counter)
            finally:
                os.close(fd)
    return report


__all__ = [
    "FileReport",
    "ManifestFile",
    "ManifestReport",
    "is_sealed",
    "model_source",
    "open_model",
    "open_model_async",
    "unseal_model",
    "verify_model",
]
