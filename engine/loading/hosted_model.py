"""One model the engine serves: weights, tokenizer, limits, read from a checkpoint source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.config import EngineConfig, ModelSpec
from engine.core.outputs import ModelInfo
from engine.errors import ModelLoadError, UnsupportedQuantizationError
from engine.loading.checkpoint import Checkpoint
from engine.loading.model_config import ModelConfig
from engine.loading.model_kind import detect_kind
from engine.loading.model_loader import load_model
from engine.loading.model_source import DirectorySource, ModelSource
from engine.quantization.kv_quant import kv_storage_dtype
from engine.quantization.scheme import WeightQuant
from engine.text.tokenizer import Tokenizer
from engine.worker.distributed import place

__all__ = ["HostedModel", "load_hosted_models", "model_source"]

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
    tp_size: int = 1
    """Tensor-parallel ranks the weights are split across; this process holds one slice."""
    num_stage_layers: int = 0
    """The decoder layers this rank's pipeline stage runs and caches (all of them on one stage)."""
    kind: str = "chat"
    """"chat" or "embedding" (``engine.loading.model_kind``)."""
    kv_dtype: torch.dtype | None = None
    """What the KV cache stores K/V as; None: ``dtype`` (float8_e4m3fn with ``kv_cache_dtype = "fp8"``)."""

    @classmethod
    def load(
        cls,
        spec: ModelSpec,
        source: ModelSource,
        *,
        dtype: str,
        device: torch.device,
        kv_cache_dtype: str = "auto",
    ) -> HostedModel:
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
        kind = spec.kind or detect_kind(ckpt)
        model = load_model(ckpt, config, torch_dtype, device, quant, needs_lm_head=kind == "chat")
        here = place()
        kv_dtype = kv_storage_dtype(kv_cache_dtype, torch_dtype)
        return cls(
            spec.name,
            config,
            tokenizer,
            model,
            torch_dtype,
            max_len,
            frozenset(eos),
            quant,
            here.tp_size,
            len(here.stage_layers(config.num_layers)),
            kind,
            kv_dtype,
        )

    @property
    def is_embedding(self) -> bool:
        return self.kind == "embedding"

    @property
    def num_local_kv_heads(self) -> int:
        """The KV heads this rank computes and caches."""
        return self.config.num_kv_heads // self.tp_size

    @property
    def cache_dtype(self) -> torch.dtype:
        """The element type of this model's paged K/V."""
        return self.kv_dtype or self.dtype

    @property
    def kv_bytes_per_token(self) -> int:
        c = self.config
        return self.num_stage_layers * 2 * self.num_local_kv_heads * c.head_dim * self.cache_dtype.itemsize

    def info(self) -> ModelInfo:
        return ModelInfo(
            name=self.name,
            max_model_len=self.max_model_len,
            vocab_size=self.config.vocab_size,
            has_chat_template=self.tokenizer.chat_template is not None,
            dtype=str(self.dtype).removeprefix("torch."),
            tool_syntax=template.tool_syntax if (template := self.tokenizer.chat_template) else "",
            quantization=None if self.quant is None else self.quant.name,
            kv_cache_dtype=str(self.cache_dtype).removeprefix("torch."),
            kind=self.kind,
            embedding_size=self.config.hidden_size if self.is_embedding else 0,
        )


def model_source(
    spec: ModelSpec, data_dir: str | Path, sources: Mapping[str, ModelSource] | None
) -> ModelSource:
    """The source given for a model, else its directory (relative to ``data_dir``)."""
    given = (sources or {}).get(spec.name)
    if given is not None:
        return given
    path = Path(spec.path)
    return DirectorySource(path if path.is_absolute() else Path(data_dir) / path)


def load_hosted_models(
    config: EngineConfig,
    data_dir: str | Path,
    sources: Mapping[str, ModelSource] | None,
    device: torch.device,
    *,
    skip_failed: bool,
) -> tuple[dict[str, HostedModel], dict[str, str]]:
    """Every model of ``config``, and the reasons of those that failed (when ``skip_failed``)."""
    models: dict[str, HostedModel] = {}
    failed: dict[str, str] = {}
    for spec in config.models:
        try:
            source = model_source(spec, data_dir, sources)
            models[spec.name] = HostedModel.load(
                spec, source, dtype=config.dtype_of(spec), device=device, kv_cache_dtype=config.kv_cache_dtype
            )
        except ModelLoadError as exc:
            # A server keeps its other models in service; the Python API fails loudly.
            if not skip_failed:
                raise
            failed[spec.name] = str(exc)
    if not models:
        raise ModelLoadError(f"no model could be loaded: {failed}")
    return models, failed


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
