"""A loader that names the tensors it wants reads only their bytes from a source that reads ranges."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

from engine.errors import ModelLoadError
from engine.loading.checkpoint import Checkpoint
from engine.loading.model_source import DirectorySource


class CountingSource(DirectorySource):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.bytes_read = 0

    def read(self, name: str) -> bytes:
        data = super().read(name)
        self.bytes_read += len(data) if name.endswith(".safetensors") else 0
        return data

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        self.bytes_read += length
        return super().read_range(name, offset, length)


def stage_one(name: str) -> bool:
    return name.startswith("model.layers.1.")


def test_wanted_tensors_equal_the_whole_reads_and_cost_only_their_bytes(model_dirs: dict[str, Path]) -> None:
    source = CountingSource(model_dirs["qwen2"])
    whole = dict(Checkpoint(source).weights())
    whole_bytes, source.bytes_read = source.bytes_read, 0
    part = dict(Checkpoint(source).weights(stage_one))
    assert sorted(part) == sorted(n for n in whole if stage_one(n)) and part
    for name, tensor in part.items():
        assert tensor.dtype == whole[name].dtype and torch.equal(tensor, whole[name]), name
    tensor_bytes = sum(t.numel() * t.element_size() for t in part.values())
    header = source.bytes_read - tensor_bytes  # the length prefix and the JSON header
    assert 0 < header < 20_000 and source.bytes_read < whole_bytes / 2


def test_a_source_without_ranges_filters_the_whole_file(model_dirs: dict[str, Path]) -> None:
    class WholeFiles:
        def __init__(self, inner: DirectorySource) -> None:
            self.inner, self.name = inner, inner.name

        def names(self) -> list[str]:
            return self.inner.names()

        def read(self, name: str) -> bytes:
            return self.inner.read(name)

    part = dict(Checkpoint(WholeFiles(DirectorySource(model_dirs["qwen2"]))).weights(stage_one))
    assert part and all(stage_one(n) for n in part)


def test_a_bad_header_is_named(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"[1] ")
    with pytest.raises(ModelLoadError, match=r"model\.safetensors is not a valid safetensors file: header"):
        list(Checkpoint(DirectorySource(tmp_path)).weights(stage_one))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(ModelLoadError, match="header of 1099511627776 bytes"):
        list(Checkpoint(DirectorySource(tmp_path)).weights(stage_one))


def test_named_rows_are_the_only_ones_read(model_dirs: dict[str, Path]) -> None:
    """A tensor-parallel rank's rows of a tensor split on its first dimension: read alone, in
    their place of a tensor of the whole shape (whose other rows the loader never looks at)."""
    name = "model.layers.0.mlp.gate_proj.weight"
    source = CountingSource(model_dirs["qwen2"])
    whole = dict(Checkpoint(source).weights())[name]
    source.bytes_read = 0
    ((got_name, got),) = Checkpoint(source).weights(lambda n: n == name, lambda n: (32, 96))
    assert got_name == name and got.shape == whole.shape
    assert torch.equal(got[32:96], whole[32:96])
    row_bytes = whole.shape[1] * whole.element_size()
    assert source.bytes_read - 64 * row_bytes < 20_000  # the rows, plus the header
    with pytest.raises(ModelLoadError, match="rows 96:300 outside 128"):
        list(Checkpoint(source).weights(lambda n: n == name, lambda n: (96, 300)))
