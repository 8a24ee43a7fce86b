"""The models a caller may see: those it may use for chat, completions or embeddings.

``GET /v1/models`` and gRPC ``ListModels`` answer from here; a model the caller may not use reads
as absent, so names cannot be enumerated.
"""

from __future__ import annotations

import time

from common.principal import Principal
from gateway.engine_pool import EnginePool
from gateway.openai_types import ModelObject
from policies import Authorizer

__all__ = ["visible_models"]

_STARTED = int(time.time())
_MODEL_ACTIONS = ("chat", "completion", "embedding")
"""A model is listed to a caller who may use it for any of these."""


async def visible_models(
    principal: Principal, engines: EnginePool, authorizer: Authorizer
) -> dict[str, ModelObject]:
    """Raises PolicyUnavailableError (503) when the policy in force cannot be known."""
    cards = engines.models()
    await authorizer.current()  # a policy change whose call has returned is in force here
    allowed = {m for action in _MODEL_ACTIONS for m in authorizer.allowed_models(principal, action, cards)}
    return {
        name: ModelObject(
            id=name,
            created=_STARTED,
            max_model_len=card.max_model_len,
            quantization=card.quantization,
            kv_cache_dtype=card.kv_cache_dtype or None,
            kind=card.kind,
        )
        for name, card in sorted(cards.items())
        if name in allowed
    }
