"""Tensor-parallel rank and world size: the one place layers ask which shard is theirs.

World size is 1 until ``join`` initialises ``torch.distributed`` (``engine.worker.rank_group``
starts the ranks); the parallel layers then take their own slice of every weight and the model
files stay single-device code. Layers read the rank and size once, when they are built, so a
model built before ``join`` stays a whole single-rank model (and never runs a collective).

The default process group (NCCL on CUDA, gloo on CPU) carries the layers' all-reduces and
all-gathers and times out after ``distributed_timeout_s``; rank 0's step plans travel through the
rendezvous store (``engine.worker.plan_channel``), where a rank waits as long as the engine idles.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public, untyped re-export

from engine.worker.plan_channel import PlanChannel

__all__ = ["START_S", "free_port", "join", "rank_device", "tp_rank", "tp_world_size"]

START_S = 120.0
"""How long rank 0 waits for the other ranks' processes to start and join."""


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
    rank: int,
    world_size: int,
    device: torch.device,
    address: str,
    timeout_s: float,
    check: Callable[[], None] | None = None,
) -> PlanChannel:
    """Join the ranks at ``address`` (``host:port``); returns the channel rank 0's plans travel on.

    Rank 0 serves the rendezvous and waits up to ``START_S`` for the others to arrive, calling
    ``check`` meanwhile (it raises when a rank died on the way); collectives then time out after
    ``timeout_s``.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
    host, port = address.rsplit(":", 1)
    store = TCPStore(
        host,
        int(port),
        world_size,
        is_master=rank == 0,
        timeout=timedelta(seconds=START_S),
        wait_for_workers=False,
    )
    if rank == 0:
        _wait_for_ranks(store, world_size, check)
    else:
        store.set(f"joined/{rank}", "1")
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return PlanChannel(store)


def _wait_for_ranks(store: TCPStore, world_size: int, check: Callable[[], None] | None) -> None:
    keys = [f"joined/{rank}" for rank in range(1, world_size)]
    deadline = time.monotonic() + START_S
    while not store.check(keys):
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"tensor-parallel ranks did not join within {START_S:.0f} s")
        time.sleep(0.02)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
