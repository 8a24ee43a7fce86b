"""The files of one Hugging Face checkpoint, read through a ``ModelSource``.

Weights are parsed from memory (``safetensors.torch.load``), never from a path, so a sealed source
can hand over decrypted bytes that never reach the disk. A sharded checkpoint is read shard by
shard through its ``model.safetensors.index.json``.

A loader that wants only some tensors (a pipeline stage: its own layers) names them; from a
source that reads ranges (``RangeSource``) each file's header is read first, then only the
wanted tensors' bytes (a sealed source decrypts only the chunks they touch)::

    safetensors file: [u64 little-endian n][n bytes of JSON header][data]
    header: {"name": {"dtype": "BF16", "shape": [out, in], "data_offsets": [begin, end]}, ...}
            offsets count from the start of the data
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterator
from typing import Any

import torch
from safetensors.torch import load as load_safetensors

from engine.errors import ModelLoadError
from engine.loading.model_source import ModelSource, RangeSource

__all__ = ["Checkpoint", "Rows"]

Rows = Callable[[str], "tuple[int, int] | None"]
"""A loader's answer, per tensor name: the rows [start, stop) of its first dimension it takes."""

_INDEX = "model.safetensors.index.json"
_MAX_HEADER = 100 << 20
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


class Checkpoint:
    """JSON files and weight tensors of one model directory."""

    def __init__(self, source: ModelSource) -> None:
        self.source = source
        self._names = set(source.names())

    @property
    def name(self) -> str:
        return self.source.name

    def has(self, file: str) -> bool:
        return file in self._names

    def json(self, file: str) -> dict[str, Any]:
        """A required JSON file holding an object."""
        data = self.json_any(file)
        if not isinstance(data, dict):
            raise ModelLoadError(f"{self.name}: {file} must hold a JSON object")
        return data

    def json_any(self, file: str) -> Any:
        """A required JSON file, whatever its top-level value."""
        if file not in self._names:
            raise ModelLoadError(f"{self.name}: missing file {file}")
        try:
            return json.loads(bytes(self.source.read(file)))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{self.name}: {file} is not valid JSON: {exc}") from exc

    def optional_json(self, file: str) -> dict[str, Any]:
        return self.json(file) if file in self._names else {}

    def text(self, file: str) -> str:
        return bytes(self.source.read(file)).decode("utf-8")

    def weight_files(self) -> list[str]:
        if _INDEX in self._names:
            weight_map = self.json(_INDEX).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ModelLoadError(f"{self.name}: {_INDEX} has no weight_map")
            files = sorted(set(weight_map.values()))
            missing = [f for f in files if f not in self._names]
            if missing:
                raise ModelLoadError(f"{self.name}: missing weight shard {missing[0]} named in {_INDEX}")
            return files
        files = sorted(n for n in self._names if n.endswith(".safetensors") and "/" not in n)
        if not files:
            raise ModelLoadError(f"{self.name}: missing file model.safetensors (no *.safetensors weights)")
        return files

    def weights(
        self, wanted: Callable[[str], bool] | None = None, rows: Rows | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Every (name, tensor) of the checkpoint, or those ``wanted`` names; one shard in memory
        at a time, or only the wanted tensors of it from a ``RangeSource`` (and of a tensor for
        which ``rows`` names a range, only those rows: see ``_read_rows``)."""
        for file in self.weight_files():
            if wanted is not None and isinstance(self.source, RangeSource):
                yield from self._read_wanted(self.source, file, wanted, rows)
                continue
            try:
                tensors = load_safetensors(bytes(self.source.read(file)))
            except Exception as exc:  # safetensors raises its own SafetensorError
                raise ModelLoadError(f"{self.name}: {file} is not a valid safetensors file: {exc}") from exc
            yield from (item for item in tensors.items() if wanted is None or wanted(item[0]))

    def _read_wanted(
        self, source: RangeSource, file: str, wanted: Callable[[str], bool], rows: Rows | None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        def bad(why: str) -> ModelLoadError:
            return ModelLoadError(f"{self.name}: {file} is not a valid safetensors file: {why}")

        try:
            (n,) = struct.unpack("<Q", bytes(source.read_range(file, 0, 8)))
            if n > _MAX_HEADER:
                raise bad(f"header of {n} bytes")
            header = json.loads(bytes(source.read_range(file, 8, n)))
        except (ValueError, struct.error) as exc:
            raise bad(str(exc)) from exc
        if not isinstance(header, dict):
            raise bad("header is not an object")
        for name, info in header.items():
            if name == "__metadata__" or not wanted(name):
                continue
            try:
                dtype = _DTYPES[info["dtype"]]
                shape = [int(d) for d in info["shape"]]
                begin, end = (int(o) for o in info["data_offsets"])
                if end - begin != math.prod(shape) * dtype.itemsize:
                    raise ValueError(f"{end - begin} bytes for shape {shape} of {info['dtype']}")
                part = rows(name) if rows is not None and shape else None
                if part is not None:
                    yield name, _read_rows(source, file, 8 + n + begin, dtype, shape, part)
                    continue
                data = bytearray(source.read_range(file, 8 + n + begin, end - begin))
                tensor = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
                yield name, tensor.reshape(shape)
            except (KeyError, TypeError, ValueError, RuntimeError) as exc:
                raise bad(f"tensor {name}: {exc}") from exc


def _read_rows(
    source: RangeSource, file: str, offset: int, dtype: torch.dtype, shape: list[int], part: tuple[int, int]
) -> torch.Tensor:
    """A tensor of ``shape`` whose rows ``part`` are read from the file and the others are never
    written: the layer's ``weight_loader`` still slices the rows it takes from a whole-shaped
    tensor (so slicing stays in one place), and the untouched rows of a fresh allocation take no
    memory pages."""
    start, stop = part
    if not 0 <= start < stop <= shape[0]:
        raise ValueError(f"rows {start}:{stop} outside {shape[0]}")
    row_bytes = math.prod(shape[1:]) * dtype.itemsize
    data = bytearray(source.read_range(file, offset + start * row_bytes, (stop - start) * row_bytes))
    out = torch.empty(shape, dtype=dtype)
    out[start:stop] = torch.frombuffer(data, dtype=dtype).reshape(stop - start, *shape[1:])
    return out
