"""``rotate``: a new master key version, every model's data key rewrapped, the old versions retired.

Weights are not re-encrypted: only each file header's key reference and wrapped data key change
(in place, same length) and the manifest is re-signed. Headers are rewritten one file at a time,
so a crash leaves files under old and new versions, both still live; retirement happens only after
every listed model was rewrapped and verified to open under the new version.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from common.audit_event import AuditEvent
from common.audit_sink import AuditSink
from keys.errors import KeysError
from keys.key_audit import key_event, record_all
from keys.manifest import SIGNATURE_NAME, encode_signature, read_verified_manifest
from keys.progress import Progress
from keys.provider import KeyProvider, KeyRef, WrappedKey
from keys.report import RotationReport
from keys.seal_registry import SealRegistry
from keys.sealed_file import read_header
from keys.sealed_model import is_sealed, open_model


def _replace_atomically(target: Path, data: bytes) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)


def _rewrap_model(model_dir: Path, provider: KeyProvider, new: KeyRef, process: str) -> list[AuditEvent]:
    manifest, _, _ = read_verified_manifest(model_dir, provider)
    rewrapped: dict[tuple[KeyRef, bytes], WrappedKey] = {}
    events: list[AuditEvent] = []
    for entry in manifest.files:
        path = model_dir / entry.sealed_name
        header, length, _ = read_header(path, str(path))
        cache_key = (header.wrapped.ref, header.wrapped.blob)
        if header.wrapped.ref == new:
            continue
        if cache_key not in rewrapped:
            ref = header.wrapped.ref
            dek = provider.unwrap(header.wrapped.blob, ref.key_id, ref.version)
            rewrapped[cache_key] = provider.wrap(dek)
            events.append(
                key_event("rewrap", ref, model=manifest.model_id, process=process, provider=provider.kind)
            )
        encoded = header.with_wrapped(rewrapped[cache_key]).encode()
        if len(encoded) != length:
            raise KeysError(
                f"{path}: rewrapped header changes length ({length} -> {len(encoded)}); not rewritten"
            )
        with open(path, "r+b") as stream:
            stream.write(encoded)
            stream.flush()
            os.fsync(stream.fileno())
    raw = (model_dir / "manifest.json").read_bytes()
    _replace_atomically(model_dir / SIGNATURE_NAME, encode_signature(provider.sign(raw)))
    return events


def _versions_in_use(model_dirs: Sequence[str | Path]) -> set[int]:
    """Key versions the data keys of ``model_dirs`` are wrapped under (headers only, nothing unwrapped)."""
    versions: set[int] = set()
    for model_dir in model_dirs:
        for sealed in Path(model_dir).rglob("*.sealed"):
            header, _, _ = read_header(sealed, str(sealed))
            versions.add(header.wrapped.ref.version)
    return versions


def default_model_dirs(data_dir: Path) -> list[str]:
    """What ``rotate`` rewraps when no directory is named: every sealed model under <data_dir>/models."""
    root = data_dir / "models"
    return sorted(str(p) for p in root.iterdir() if is_sealed(p)) if root.is_dir() else []


def _with_registered(model_dirs: Sequence[str | Path], registry: SealRegistry | None) -> list[str]:
    dirs = [str(Path(d).resolve()) for d in model_dirs]
    if registry is not None:
        dirs += [s.path for s in registry.read().sealings]
    return list(dict.fromkeys(dirs))


def rotate(
    provider: KeyProvider,
    model_dirs: Sequence[str | Path],
    *,
    audit: AuditSink | None = None,
    process: str = "rotate",
    registry: SealRegistry | None = None,
    progress: Progress | None = None,
) -> RotationReport:
    """Rotate the master key and rewrap ``model_dirs`` plus every sealing in ``registry``.

    Without a registry, a model left out stays under the old version and is lost at retirement;
    with one, every registered sealing (wherever it lives) is rewrapped, the registry is re-signed
    under the new version, and no version still wrapping a registered model is retired.
    ``progress`` is told (models rewrapped or failed so far, models in all) after each model."""
    dirs = _with_registered(model_dirs, registry)
    new = provider.rotate()
    done: list[str] = []
    failures: list[str] = []
    events = [key_event("rotate", new, model="*", process=process, provider=provider.kind)]
    for model_dir in dirs:
        path = Path(model_dir)
        try:
            events.extend(_rewrap_model(path, provider, new, process))
            open_model(path, provider, audit=None, process=process).close()
            done.append(str(path))
        except KeysError as exc:
            failures.append(f"{path}: {exc.message}")
        except FileNotFoundError:
            failures.append(
                f"{path}: registered sealing is missing (`strongroom models unregister` if destroyed)"
            )
        if progress is not None:
            progress(len(done) + len(failures), len(dirs))
    audit_events = list(events)
    if failures:
        asyncio.run(record_all(audit, audit_events))
        raise KeysError(
            f"rotation to {new} incomplete, older versions NOT retired; fix and rerun: " + "; ".join(failures)
        )
    floor = new.version
    if registry is not None:
        registry.resign()
        floor = min({new.version} | _versions_in_use(dirs))
    retired = provider.retire_before(floor)
    kept = tuple(KeyRef(key_id=new.key_id, version=v) for v in range(floor, new.version))
    for ref in retired:
        audit_events.append(key_event("retire", ref, model="*", process=process, provider=provider.kind))
    asyncio.run(record_all(audit, audit_events))
    return RotationReport(new_key=new, rewrapped=tuple(done), retired=tuple(retired), kept=kept)
