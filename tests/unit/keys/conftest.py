from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# --import-mode=importlib puts no test directory on sys.path; the shared helpers live next to this file.
sys.path.insert(0, str(Path(__file__).parent))

from keys_testing import CHUNK

from keys import KeyFileProvider, seal_model


@pytest.fixture
def provider(tmp_path: Path) -> KeyFileProvider:
    return KeyFileProvider.create(tmp_path / "keys" / "master.key")


@pytest.fixture
def plain_files() -> dict[str, bytes]:
    return {
        "config.json": b'{"architectures": ["Tiny"]}',
        "model.safetensors": os.urandom(CHUNK * 3 + 17),
        "exact.bin": os.urandom(CHUNK * 2),
        "empty.txt": b"",
        "tokenizer/vocab.txt": b"a\nb\nc\n",
    }


@pytest.fixture
def sealed_dir(tmp_path: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]) -> Path:
    dst = tmp_path / "models" / "tiny"
    seal_model(plain_files, dst, "tiny", provider, chunk_size=CHUNK)
    return dst
