"""Strongroom's inference engine: several Hugging Face models over one shared paged KV pool.

Heavy (torch) names load on first use, so importing a light module such as
``engine.sampling_params`` or ``engine.errors`` does not pull in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.config import EngineConfig, ModelSpec
    from engine.llm import LLM
    from engine.llm_engine import LLMEngine
    from engine.model_source import DirectorySource, ModelSource
    from engine.outputs import CompletionOutput, ModelInfo, RequestOutput, StreamDelta, TokenLogprob
    from engine.sampling_params import SamplingParams

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
    "AsyncEngine": "engine.async_engine",
    "CompletionOutput": "engine.outputs",
    "DirectorySource": "engine.model_source",
    "EngineConfig": "engine.config",
    "LLMEngine": "engine.llm_engine",
    "ModelInfo": "engine.outputs",
    "ModelSource": "engine.model_source",
    "ModelSpec": "engine.config",
    "RequestOutput": "engine.outputs",
    "SamplingParams": "engine.sampling_params",
    "StreamDelta": "engine.outputs",
    "TokenLogprob": "engine.outputs",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
