"""One model the engine serves: weights, tokenizer, limits, read from a checkpoint source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engine.config import ModelSpec
from engine.core.outputs import ModelInfo
from engine.errors import ModelLoadError, UnsupportedQuantizationError
from engine.loading.checkpoint import Checkpoint
from engine.loading.model_config import ModelConfig
from engine.loading.model_loader import load_model
from engine.loading.model_source import ModelSource
from engine.quantization.scheme import WeightQuant
from engine.text.tokenizer import Tokenizer

__all__ = ["HostedModel"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class HostedModel:
    name: str
    config: ModelConfig
    tokenizer: Tokenizer
    model: nn.Module
    dtype: torch.dtype
    max_model_len: int
    eos_token_ids: frozenset[int]
    quant: WeightQuant | None = None

    @classmethod
    def load(cls, spec: ModelSpec, source: ModelSource, *, dtype: str, device: torch.device) -> HostedModel:
        ckpt = Checkpoint(source)
        raw = ckpt.json("config.json")
        config = ModelConfig.from_hf(raw, ckpt.name)
        quant = _quantization(spec, raw, ckpt.name)
        tokenizer = Tokenizer.from_checkpoint(ckpt)
        torch_dtype = _DTYPES.get(config.checkpoint_dtype if dtype == "auto" else dtype)
        if torch_dtype is None:
            raise ModelLoadError(f"{ckpt.name}: unsupported checkpoint dtype {config.checkpoint_dtype!r}")
        generation = ckpt.optional_json("generation_config.json")
        eos = set(config.eos_token_ids) | set(_ids(generation.get("eos_token_id")))
        if tokenizer.eos_token_id is not None:
            eos.add(tokenizer.eos_token_id)
        max_len = min(spec.max_model_len or config.max_position_embeddings, config.max_position_embeddings)
        model = load_model(ckpt, config, torch_dtype, device, quant)
        return cls(spec.name, config, tokenizer, model, torch_dtype, max_len, frozenset(eos), quant)

    @property
    def kv_bytes_per_token(self) -> int:
        c = self.config
        return c.num_layers * 2 * c.num_kv_heads * c.head_dim * self.dtype.itemsize

    def info(self) -> ModelInfo:
        return ModelInfo(
            name=self.name,
            max_model_len=self.max_model_len,
            vocab_size=self.config.vocab_size,
            has_chat_template=self.tokenizer.chat_template is not None,
            dtype=str(self.dtype).removeprefix("torch."),
            quantization=None if self.quant is None else self.quant.name,
        )


def _quantization(spec: ModelSpec, raw: dict[str, Any], source: str) -> WeightQuant | None:
    stored = WeightQuant.from_hf(raw, source)
    if spec.quantization is None:
        return stored
    if stored is not None:
        raise UnsupportedQuantizationError(
            f"{source}: the checkpoint is already quantized ({stored.method} {stored.name});"
            f" leave quantization unset to serve it, not {spec.quantization!r}"
        )
    return WeightQuant.requested(spec.quantization)


def _ids(value: object) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [int(v) for v in value]
    return [int(value)]  # type: ignore[call-overload]
