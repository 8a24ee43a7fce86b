"""Tensor-parallel rank and world size: the one place layers ask which shard is theirs.

World size is 1 until a launcher initialises ``torch.distributed``; the parallel layers then take
their own slice of every weight and the model files stay single-device code.
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["tp_rank", "tp_world_size"]


def tp_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def tp_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
