"""The files of one Hugging Face checkpoint, read through a ``ModelSource``.

Weights are parsed from memory (``safetensors.torch.load``), never from a path, so a sealed source
can hand over decrypted bytes that never reach the disk. A sharded checkpoint is read shard by
shard through its ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import torch
from safetensors.torch import load as load_safetensors

from engine.errors import ModelLoadError
from engine.loading.model_source import ModelSource

__all__ = ["Checkpoint"]

_INDEX = "model.safetensors.index.json"


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

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every (name, tensor) of the checkpoint, one shard in memory at a time."""
        for file in self.weight_files():
            try:
                tensors = load_safetensors(bytes(self.source.read(file)))
            except Exception as exc:  # safetensors raises its own SafetensorError
                raise ModelLoadError(f"{self.name}: {file} is not a valid safetensors file: {exc}") from exc
            yield from tensors.items()
