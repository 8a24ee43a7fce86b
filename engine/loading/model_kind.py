"""What a checkpoint is for: generating text ("chat") or embedding it ("embedding").

A ``ModelSpec`` may declare the kind; otherwise it is read from the checkpoint. A checkpoint is an
embedding model when it carries sentence-transformers' ``modules.json`` with a ``Pooling`` module
(as Qwen3-Embedding and most published embedding models do). Only last-token pooling is served,
the pooling of decoder embedding models; a checkpoint asking for another pooling is refused at
load time rather than served with the wrong vectors. Everything else is a chat model.
"""

from __future__ import annotations

from engine.errors import ModelLoadError
from engine.loading.checkpoint import Checkpoint

__all__ = ["MODEL_KINDS", "detect_kind"]

MODEL_KINDS = ("chat", "embedding")
_POOLING = "sentence_transformers.models.Pooling"


def detect_kind(ckpt: Checkpoint) -> str:
    modules = _modules(ckpt)
    pooling = [m for m in modules if m.get("type") == _POOLING]
    if not pooling:
        return "chat"
    config_file = f"{str(pooling[0].get('path', '')).strip('/')}/config.json".lstrip("/")
    config = ckpt.optional_json(config_file)
    if not config.get("pooling_mode_lasttoken", False):
        modes = sorted(
            k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v
        )
        raise ModelLoadError(
            f"{ckpt.name}: embedding pooling {modes or 'unspecified'} is not supported (only last-token pooling)"
        )
    return "embedding"


def _modules(ckpt: Checkpoint) -> list[dict[str, object]]:
    if not ckpt.has("modules.json"):
        return []
    raw = ckpt.json_any("modules.json")
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ModelLoadError(f"{ckpt.name}: modules.json must be a list of modules")
    return raw
