"""Tensor-parallel rank and world size: the one place layers ask which shard is theirs.

World size is 1 until ``join`` initialises ``torch.distributed`` (``engine.worker.rank_group``
starts the ranks); the parallel layers then take their own slice of every weight and the model
files stay single-device code. Layers read the rank and size once, when they are built, so a
model built before ``join`` stays a whole single-rank model (and never runs a collective).

Two process groups join the ranks: the default one (NCCL on CUDA, gloo on CPU) carries the
layers' all-reduces and all-gathers and times out after ``distributed_timeout_s``; a gloo group
carries rank 0's step plans, and waits as long as the engine idles.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["free_port", "join", "rank_device", "tp_rank", "tp_world_size"]

_IDLE = timedelta(days=3650)
"""The plan group's timeout: a rank waits for the next step as long as the engine has no work."""


def tp_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def tp_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank_device(device: str, rank: int) -> torch.device:
    """Rank ``rank``'s device: the configured CUDA device plus the rank (one GPU each), or the CPU."""
    base = torch.device(device)
    if base.type != "cuda":
        return base
    return torch.device("cuda", (base.index or 0) + rank)


def join(
    rank: int, world_size: int, device: torch.device, address: str, timeout_s: float
) -> dist.ProcessGroup:
    """Join the ranks at ``address`` (``host:port``); returns the group step plans travel on."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://{address}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    group: dist.ProcessGroup = dist.new_group(backend="gloo", timeout=_IDLE)
    return group


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
