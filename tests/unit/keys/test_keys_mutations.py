"""Every tampering of a sealed model is rejected: 100% of single-bit flips in every file, chunk
swaps, truncation at every chunk boundary, extension, headers or files swapped, manifest edits."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import msgspec
import pytest
from keys_testing import CHUNK

from keys import KeyFileProvider, KeysError, SealedModelError, open_model, seal_model, verify_model
from keys._crypto import TAG_BYTES
from keys.header import FileHeader
from keys.manifest import Manifest, ManifestFile, encode_signature

STRIDE = CHUNK + TAG_BYTES


def load_everything(model_dir: Path, provider: KeyFileProvider) -> None:
    with open_model(model_dir, provider, audit=None, process="test") as source:
        for name in source.names():
            source.read(name)


def assert_rejected(model_dir: Path, provider: KeyFileProvider) -> str:
    with pytest.raises(SealedModelError) as info:
        load_everything(model_dir, provider)
    return str(info.value)


def header_len(path: Path) -> int:
    return FileHeader.decode(path.read_bytes(), str(path))[1]


def test_untouched_model_loads(sealed_dir: Path, provider: KeyFileProvider) -> None:
    load_everything(sealed_dir, provider)


@pytest.mark.parametrize(
    "victim", ["model.safetensors.sealed", "empty.txt.sealed", "manifest.json", "manifest.sig"]
)
def test_every_bit_flip_is_rejected(sealed_dir: Path, provider: KeyFileProvider, victim: str) -> None:
    path = sealed_dir / victim
    original = path.read_bytes()
    bits = [0, 3, 7] if len(original) < 400 else [5]
    for offset in range(len(original)):
        for bit in bits:
            mutated = bytearray(original)
            mutated[offset] ^= 1 << bit
            path.write_bytes(mutated)
            try:
                load_everything(sealed_dir, provider)
            except SealedModelError:
                continue
            pytest.fail(f"flip of bit {bit} at byte {offset} of {victim} was accepted")
    path.write_bytes(original)
    load_everything(sealed_dir, provider)


def test_chunk_swaps_are_rejected(sealed_dir: Path, provider: KeyFileProvider) -> None:
    path = sealed_dir / "model.safetensors.sealed"
    original = path.read_bytes()
    body = header_len(path)
    full = [original[body + i * STRIDE : body + (i + 1) * STRIDE] for i in range(3)]
    for a, b in [(0, 1), (1, 2), (0, 2)]:
        chunks = list(full)
        chunks[a], chunks[b] = chunks[b], chunks[a]
        path.write_bytes(original[:body] + b"".join(chunks) + original[body + 3 * STRIDE :])
        assert "chunk" in assert_rejected(sealed_dir, provider)


def test_truncation_at_every_boundary_and_extension(sealed_dir: Path, provider: KeyFileProvider) -> None:
    path = sealed_dir / "model.safetensors.sealed"
    original = path.read_bytes()
    body = header_len(path)
    cuts = [body + i * STRIDE for i in range(4)] + [len(original) - 1, 10, 0]
    for cut in cuts:
        path.write_bytes(original[:cut])
        assert_rejected(sealed_dir, provider)
    for extra in [b"\x00", original[body : body + STRIDE], original[-(17 + TAG_BYTES) :]]:
        path.write_bytes(original + extra)
        assert "truncated or extended" in assert_rejected(sealed_dir, provider)


def test_truncated_last_flag_rejected_even_if_manifest_agreed(
    tmp_path: Path, provider: KeyFileProvider
) -> None:
    """The size check is not the only guard: a body cut at a chunk boundary lacks its last chunk.

    The manifest is re-signed with the real key here, which an attacker cannot do, to isolate the
    last-chunk flag as the guard."""
    full = tmp_path / "full"
    seal_model({"w": b"x" * (CHUNK * 3)}, full, "m", provider, chunk_size=CHUNK)
    path = full / "w.sealed"
    body = header_len(path)
    path.write_bytes(path.read_bytes()[: body + 2 * STRIDE])

    def _tags(p: Path) -> str:
        return hashlib.sha256(
            b"".join(
                p.read_bytes()[body + (i + 1) * STRIDE - TAG_BYTES : body + (i + 1) * STRIDE]
                for i in range(2)
            )
        ).hexdigest()

    manifest = Manifest.decode((full / "manifest.json").read_bytes(), "m")
    forged = msgspec.structs.replace(
        manifest,
        files=(
            ManifestFile(
                name="w",
                size=2 * CHUNK,
                sha256=_sha(b"x" * 2 * CHUNK),
                tags_sha256=_tags(path),
            ),
        ),
    )
    raw = forged.encode()
    (full / "manifest.json").write_bytes(raw)
    (full / "manifest.sig").write_bytes(encode_signature(provider.sign(raw)))
    assert "chunk 1 failed authentication" in assert_rejected(full, provider)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_signed_digests_are_checked(tmp_path: Path, provider: KeyFileProvider) -> None:
    """With a (hypothetically) re-signed manifest, both digests still guard the plaintext."""
    data = b"y" * (CHUNK * 2 + 3)
    model = tmp_path / "m"
    seal_model({"w": data}, model, "m", provider, chunk_size=CHUNK)
    manifest = Manifest.decode((model / "manifest.json").read_bytes(), "m")
    assert manifest.files[0].sha256 == _sha(data)
    for field in ("tags_sha256", "sha256"):
        entry = msgspec.structs.replace(manifest.files[0], **{field: _sha(b"other")})
        raw = msgspec.structs.replace(manifest, files=(entry,)).encode()
        (model / "manifest.json").write_bytes(raw)
        (model / "manifest.sig").write_bytes(encode_signature(provider.sign(raw)))
        with pytest.raises(SealedModelError, match=r"differs? from the signed manifest"):
            verify_model(model, provider)
    with open_model(model, provider, audit=None, process="t") as source:
        assert source.read("w") == data  # tags right, flat SHA-256 wrong: only verify sees it


def test_headers_and_files_swapped_between_files(sealed_dir: Path, provider: KeyFileProvider) -> None:
    a, b = sealed_dir / "model.safetensors.sealed", sealed_dir / "exact.bin.sealed"
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    ha, hb = header_len(a), header_len(b)
    b.write_bytes(raw_a[:ha] + raw_b[hb:])
    assert "exact.bin" in assert_rejected(sealed_dir, provider)
    b.write_bytes(raw_b)
    shutil.copy(sealed_dir / "config.json.sealed", sealed_dir / "tokenizer" / "vocab.txt.sealed")
    assert_rejected(sealed_dir, provider)


def test_files_and_signatures_swapped_between_models(
    tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]
) -> None:
    twin = tmp_path / "twin"
    seal_model(plain_files, twin, "tiny", provider, chunk_size=CHUNK)
    original = (sealed_dir / "config.json.sealed").read_bytes()
    shutil.copy(twin / "config.json.sealed", sealed_dir / "config.json.sealed")
    assert "config.json" in assert_rejected(sealed_dir, provider)
    (sealed_dir / "config.json.sealed").write_bytes(original)
    other = tmp_path / "other"
    seal_model({"config.json": b"{}"}, other, "other", provider, chunk_size=CHUNK)
    shutil.copy(other / "manifest.sig", sealed_dir / "manifest.sig")
    assert "signature does not verify" in assert_rejected(sealed_dir, provider)


def test_manifest_edits_and_missing_files(sealed_dir: Path, provider: KeyFileProvider) -> None:
    manifest = sealed_dir / "manifest.json"
    raw = manifest.read_bytes()
    manifest.write_bytes(raw.replace(b'"tiny"', b'"tinz"'))
    assert "signature does not verify" in assert_rejected(sealed_dir, provider)
    manifest.write_bytes(raw)
    (sealed_dir / "manifest.sig").unlink()
    assert "manifest.sig missing" in assert_rejected(sealed_dir, provider)


def test_sealed_file_missing(sealed_dir: Path, provider: KeyFileProvider) -> None:
    (sealed_dir / "exact.bin.sealed").unlink()
    assert "exact.bin.sealed" in assert_rejected(sealed_dir, provider)


def test_error_is_a_keys_error_with_status(sealed_dir: Path, provider: KeyFileProvider) -> None:
    (sealed_dir / "manifest.sig").write_bytes(b"{}")
    with pytest.raises(KeysError) as info:
        load_everything(sealed_dir, provider)
    assert info.value.status_code == 500 and info.value.code.startswith("manifest")
