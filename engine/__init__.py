"""Strongroom's inference engine: several Hugging Face models over one shared paged KV pool.

Heavy (torch) names load on first use, so importing a light module such as
``engine.core.sampling_params`` or ``engine.errors`` does not pull in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.config import EngineConfig, ModelSpec
    from engine.core.outputs import CompletionOutput, ModelInfo, RequestOutput, StreamDelta, TokenLogprob
    from engine.core.sampling_params import SamplingParams
    from engine.llm import LLM
    from engine.llm_engine import LLMEngine
    from engine.loading.model_source import DirectorySource, ModelSource
    from engine.serving.async_engine import AsyncEngine

__all__ = [
    "LLM",
    "AsyncEngine",
    "CompletionOutput",
    "DirectorySource",
    "EngineConfig",
    "LLMEngine",
    "ModelInfo",
    "ModelSource",
    "ModelSpec",
    "RequestOutput",
    "SamplingParams",
    "StreamDelta",
    "TokenLogprob",
]

_HOMES = {
    "LLM": "engine.llm",
    "AsyncEngine": "engine.serving.async_engine",
    "CompletionOutput": "engine.core.outputs",
    "DirectorySource": "engine.loading.model_source",
    "EngineConfig": "engine.config",
    "LLMEngine": "engine.llm_engine",
    "ModelInfo": "engine.core.outputs",
    "ModelSource": "engine.loading.model_source",
    "ModelSpec": "engine.config",
    "RequestOutput": "engine.core.outputs",
    "SamplingParams": "engine.core.sampling_params",
    "StreamDelta": "engine.core.outputs",
    "TokenLogprob": "engine.core.outputs",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
