"""Where a model's files come from: a plain directory, or (keys/) a sealed one.

The loader reads every file through this interface, so sealed models decrypt straight into
memory and never touch the disk in plaintext.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from engine.errors import ModelLoadError


@runtime_checkable
class ModelSource(Protocol):
    """Read-only access to the files of one model directory."""

    @property
    def name(self) -> str:
        """A label for errors and logs (the directory path)."""
        ...

    def names(self) -> list[str]:
        """File names (relative, posix) in the model directory."""
        ...

    def read(self, name: str) -> bytes | bytearray | memoryview:
        """The whole plaintext content of one file; ModelLoadError naming the file if missing or bad."""
        ...


@runtime_checkable
class RangeSource(ModelSource, Protocol):
    """A source that also reads part of a file: a pipeline stage reads (and a sealed source
    decrypts) only the tensors its layers hold."""

    def read_range(self, name: str, offset: int, length: int) -> bytes | bytearray | memoryview:
        """Plaintext bytes [offset, offset + length) of one file; ValueError outside it."""
        ...


class DirectorySource:
    """A plaintext Hugging Face checkpoint directory on disk."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        if not self._path.is_dir():
            raise ModelLoadError(f"model directory not found: {self._path}")

    @property
    def name(self) -> str:
        return str(self._path)

    def names(self) -> list[str]:
        return sorted(p.relative_to(self._path).as_posix() for p in self._path.rglob("*") if p.is_file())

    def read(self, name: str) -> bytes:
        file = self._path / name
        if not file.is_file():
            raise ModelLoadError(f"{self._path}: missing file {name}")
        return file.read_bytes()

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        file = self._path / name
        if not file.is_file():
            raise ModelLoadError(f"{self._path}: missing file {name}")
        with open(file, "rb") as stream:
            stream.seek(offset)
            data = stream.read(length)
        if offset < 0 or len(data) != length:
            raise ValueError(f"range {offset}+{length} outside {name}")
        return data

    def __repr__(self) -> str:
        return f"DirectorySource({str(self._path)!r})"
