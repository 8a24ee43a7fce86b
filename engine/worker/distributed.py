"""This process's place among the engine's ranks: the one place layers and models ask which
shard of the weights, and which pipeline stage's layers, are theirs.

There is one rank until ``join`` initialises ``torch.distributed`` (``engine.worker.rank_group``
starts the ranks); the parallel layers then take their own slice of every weight, the model its
stage's layers, and the model files stay single-device code. Layers read the place once, when
they are built, so a model built before ``join`` stays a whole single-rank model (and never runs
a collective). The place is process-wide, as torch.distributed's own state is.

Ranks are laid out stage by stage, each stage's tensor-parallel ranks next to each other::

    tensor_parallel_size 2, pipeline_parallel_size 2:
        stage 0 (embedding, layers 0..L/2-1)     ranks 0 1   <- rank 0 schedules and samples
        stage 1 (layers L/2..L-1, norm, lm_head) ranks 2 3

Each stage's ranks form one tensor-parallel group (NCCL on CUDA, gloo on CPU) that carries the
layers' all-reduces and all-gathers; rank ``(s, t)`` sends its activations to ``(s + 1, t)``.
Collectives time out after ``distributed_timeout_s``; rank 0's step plans travel through the
rendezvous store (``engine.worker.plan_channel``), where a rank waits as long as the engine idles.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public, untyped re-export

from engine.worker.plan_channel import PlanChannel

__all__ = [
    "START_S",
    "RankPlace",
    "free_port",
    "join",
    "leave",
    "place",
    "rank_device",
    "tp_group",
    "tp_rank",
    "tp_world_size",
]

START_S = 120.0
"""How long rank 0 waits for the other ranks' processes to start and join."""


@dataclass(frozen=True, slots=True)
class RankPlace:
    """One rank's coordinates: its stage and its tensor-parallel rank within the stage."""

    rank: int
    tp_size: int = 1
    pp_size: int = 1

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def stage(self) -> int:
        return self.rank // self.tp_size

    @property
    def is_first_stage(self) -> bool:
        return self.stage == 0

    @property
    def is_last_stage(self) -> bool:
        return self.stage == self.pp_size - 1

    @property
    def next_rank(self) -> int:
        """The rank this one sends its activations to (the next stage, same tensor-parallel rank)."""
        return self.rank + self.tp_size

    @property
    def prev_rank(self) -> int:
        return self.rank - self.tp_size

    @property
    def last_stage_rank(self) -> int:
        """The rank that sends the logits to rank 0 (the last stage's tensor-parallel rank 0)."""
        return (self.pp_size - 1) * self.tp_size

    def stage_layers(self, num_layers: int) -> range:
        """The decoder layers this rank's stage runs (``check_layers`` made them divide evenly)."""
        per_stage = num_layers // self.pp_size
        return range(self.stage * per_stage, (self.stage + 1) * per_stage)


_SINGLE = RankPlace(0)
_place: RankPlace | None = None
_tp_group: Any = None
"""This stage's tensor-parallel process group; None is the default group (one stage)."""


def place() -> RankPlace:
    """This process's place; one whole rank until ``join`` (or a bare ``init_process_group``,
    which counts as one stage of tensor parallelism)."""
    if _place is not None:
        return _place
    if dist.is_available() and dist.is_initialized():
        return RankPlace(dist.get_rank(), dist.get_world_size())
    return _SINGLE


def tp_rank() -> int:
    return place().tp_rank


def tp_world_size() -> int:
    return place().tp_size


def tp_group() -> Any:
    """The group the tensor-parallel collectives of this rank's stage run in."""
    return _tp_group


def rank_device(device: str, local_rank: int) -> torch.device:
    """A rank's device: the configured CUDA device plus the rank's number on its host (one GPU
    each; the rank itself where rank 0 spawns them all), or the CPU."""
    base = torch.device(device)
    if base.type != "cuda":
        return base
    return torch.device("cuda", (base.index or 0) + local_rank)


def join(
    me: RankPlace,
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
    global _place, _tp_group
    rank, world_size = me.rank, me.world_size
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
    groups = [range(stage * me.tp_size, (stage + 1) * me.tp_size) for stage in range(me.pp_size)]
    # Every rank creates every group, in the same order (torch.distributed's rule).
    made = [dist.new_group(list(ranks)) for ranks in groups] if me.pp_size > 1 else [None]
    _place, _tp_group = me, made[me.stage]
    return PlanChannel(store)


def leave() -> None:
    """Leave the process groups; the process is one whole rank again."""
    global _place, _tp_group
    _place, _tp_group = None, None
    if dist.is_initialized():
        dist.destroy_process_group()


def _wait_for_ranks(store: TCPStore, world_size: int, check: Callable[[], None] | None) -> None:
    keys = [f"joined/{rank}" for rank in range(1, world_size)]
    deadline = time.monotonic() + START_S
    while not store.check(keys):
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"engine ranks did not join within {START_S:.0f} s")
        time.sleep(0.02)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
