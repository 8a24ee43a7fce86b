"""Rank 0's view of the other ranks: starts them, sends each step's plan, watches them.

``LLMEngine`` with ``tensor_parallel_size`` x ``pipeline_parallel_size`` = N > 1 runs rank 0 in
its own process (scheduler, block pool, prefix caching, sampling) and spawns ranks 1..N-1
(``engine.worker.rank_worker``), one process each (``torch.multiprocessing`` spawn), or only the
first ``spawned_ranks`` of them, waiting for the rest to be started on other hosts
(``strongroom engine-rank``). A spawned rank is handed plain checkpoint directories, or a
``SourceOpener`` (``engine.loading.source_opener``) with which it opens every model itself, sealed
ones through the key provider: rank 0's sealed sources, data key included, never leave it. They
meet over TCP at MASTER_ADDR:MASTER_PORT (torchrun's variables; a free loopback port when unset);
each pipeline stage runs its share of every model's layers (``engine.worker.pipeline_runner``),
and the ranks of a stage split them by heads, MLP columns and vocabulary rows. Each step, before
it runs the models, rank 0 sends the step's plan (``engine.worker.step_plan``) as one msgpack
message through the rendezvous store
(``engine.worker.plan_channel``): simple, never blocked by a stuck reader, and the same across
hosts as within one; shared memory would save a copy within a host. All ranks then run the same
forward passes, whose row-parallel layers all-reduce and whose LM head all-gathers the logits;
rank 0 samples (the last stage sends it the logits).

Failure is loud, never a hang: a rank that exits is seen before the next step is sent, a
collective with a dead peer fails at once, and one with a stuck peer after
``distributed_timeout_s``; each raises ``EngineRankError`` naming the rank, and the engine
cannot go on (the supervisor restarts the instance). Rank 0 dying closes the store, and the
other ranks exit.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine.config import EngineConfig
from engine.errors import EngineConfigError, EngineRankError, ModelLoadError
from engine.loading.checkpoint import Checkpoint
from engine.loading.hosted_model import model_source
from engine.loading.model_config import ModelConfig
from engine.loading.model_source import DirectorySource, ModelSource
from engine.loading.source_opener import SourceOpener
from engine.worker.distributed import RankPlace, free_port, join, leave, rank_device
from engine.worker.plan_channel import PlanChannel
from engine.worker.rank_worker import run_rank
from engine.worker.step_plan import StepPlan

__all__ = ["RankGroup", "check_shardable", "check_stages", "rank_name"]

log = logging.getLogger(__name__)

_EXIT_S = 1.0
"""How long a failed collective waits for the rank that broke it to exit, to name it."""
_JOIN_S = 10.0
"""How long ``close`` waits for a rank to exit before killing it."""


def check_shardable(name: str, config: ModelConfig, tp: int) -> None:
    """Refuse a model whose heads, KV heads or MLP width ``tp`` does not divide (the vocabulary
    is padded to a multiple of ``tp`` instead)."""
    for what, n in (
        ("attention heads", config.num_heads),
        ("KV heads", config.num_kv_heads),
        ("intermediate size", config.intermediate_size),
    ):
        if n % tp:
            raise EngineConfigError(f"model {name}: tensor_parallel_size {tp} does not divide its {n} {what}")


def check_stages(name: str, config: ModelConfig, pp: int) -> None:
    """Refuse a model whose decoder layers do not split evenly into ``pp`` stages of at least one."""
    if config.num_layers % pp or config.num_layers < pp:
        raise EngineConfigError(
            f"model {name}: pipeline_parallel_size {pp} does not split its {config.num_layers}"
            " decoder layers evenly into stages of at least one layer"
        )


def rank_name(rank: int, tp: int, pp: int) -> str:
    if pp == 1:
        return f"tensor-parallel rank {rank}"
    here = RankPlace(rank, tp, pp)
    return f"rank {rank} (pipeline stage {here.stage}, tensor-parallel rank {here.tp_rank})"


class RankGroup:
    def __init__(
        self, procs: list[BaseProcess], plans: PlanChannel, device: torch.device, place: RankPlace
    ) -> None:
        self._procs = procs
        self._plans = plans
        self.device = device
        """Rank 0's device."""
        self.place = place
        """Rank 0's place: the instance's sizes."""
        self.key_operations: list[Any] = []
        """What the other ranks reported of their key operations at start-up (msgpack values of
        ``engine.serving.protocol.KeyOperationEvent``): those of opening sealed models, each
        naming the rank's process."""
        self._ready = False
        self._failed: str | None = None

    @classmethod
    def start(
        cls,
        config: EngineConfig,
        data_dir: str | Path,
        sources: Mapping[str, ModelSource] | None,
        opener: SourceOpener | None = None,
    ) -> RankGroup:
        """Start (or wait for) the other ranks. With ``opener`` each spawned rank opens its own
        sources with it; without, it is handed ``sources``, which must be plain directories."""
        _refuse_unservable(config, data_dir, sources, opener)
        me = RankPlace(0, config.tensor_parallel_size, config.pipeline_parallel_size)
        device = rank_device(config.device, 0)
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT") or free_port(host))
        address = f"{host}:{port}"
        ctx = mp.get_context("spawn")
        spawned = config.spawned_ranks or me.world_size
        handed = {} if opener is not None else dict(sources or {})  # plain directories only
        procs: list[BaseProcess] = [
            ctx.Process(
                target=run_rank,
                args=(rank, config, str(data_dir), handed, address, None, None, opener),
                name=f"strongroom-rank-{rank}",
                daemon=True,
            )
            for rank in range(1, spawned)
        ]
        for p in procs:
            p.start()

        def check() -> None:
            dead = _dead_ranks(procs, me)
            if dead:
                raise EngineRankError(f"{dead} while starting")

        if spawned < me.world_size:
            log.info(
                "waiting at %s for ranks %d..%d to join from other hosts", address, spawned, me.world_size - 1
            )
        try:
            plans = join(me, device, address, config.distributed_timeout_s, check)
        except BaseException:
            _stop(procs, 0.0)
            raise
        log.info(
            "%d ranks joined at %s (tensor parallel %d x pipeline %d)",
            me.world_size,
            address,
            me.tp_size,
            me.pp_size,
        )
        return cls(procs, plans, device, me)

    @property
    def pids(self) -> list[int | None]:
        """The process ids of the ranks this host spawned (1..spawned_ranks-1)."""
        return [p.pid for p in self._procs]

    def agree(self, models: list[str], num_blocks: int) -> int:
        """Tell the ranks which models rank 0 serves; the pool size all of them can hold.
        Waits as long as the others load (a rank that fails exits, which ends the wait)."""
        self._plans.put("served", models)
        keys = [f"blocks/{rank}" for rank in range(1, self.place.world_size)]
        while not self._plans.ready(keys):
            self._check_alive()
            time.sleep(0.02)
        answers: list[int | str] = [num_blocks, *(self._plans.get(k) for k in keys)]
        for rank, answer in enumerate(answers):
            if not isinstance(answer, int):
                raise EngineRankError(f"{self._name(rank)} could not start: {answer}")
        smallest = min(a for a in answers if isinstance(a, int))
        for rank in range(1, self.place.world_size):
            self.key_operations.extend(self._plans.get(f"key_operations/{rank}"))
        self._plans.put("blocks", smallest)
        self._ready = True
        return smallest

    def send(self, plan: StepPlan | None) -> None:
        """Send one step's plan (None: stop) to every other rank."""
        self._check_alive()
        with self.watch():
            self._plans.send(plan)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Turn a failed collective into ``EngineRankError``, naming a rank that exited. Any error
        inside a step counts: the ranks no longer agree on which collective comes next."""
        if self._failed is not None:
            raise EngineRankError(self._failed)
        try:
            yield
        except (RuntimeError, dist.DistError) as exc:
            for p in self._procs:  # a peer that dropped out of a collective is exiting: name it
                p.join(_EXIT_S)
            failed = "a tensor-parallel rank failed" if self.place.pp_size == 1 else "an engine rank failed"
            self._failed = f"{self._dead_ranks() or failed}: {exc}"
            raise EngineRankError(self._failed) from exc

    def _check_alive(self) -> None:
        dead = self._dead_ranks()
        if dead:
            self._failed = dead
            raise EngineRankError(dead)

    def _dead_ranks(self) -> str:
        return _dead_ranks(self._procs, self.place)

    def _name(self, rank: int) -> str:
        return rank_name(rank, self.place.tp_size, self.place.pp_size)

    def close(self) -> None:
        """Stop the other ranks and leave the process groups."""
        orderly = self._ready and self._failed is None and not self._dead_ranks()
        if orderly:
            with suppress(RuntimeError, dist.DistError):
                self._plans.send(None)
        # Otherwise (a failure, or a start that did not finish) waiting would only delay the
        # restart: end them now.
        _stop(self._procs, _JOIN_S if orderly else 0.0)
        self._ready = False
        leave()


def _refuse_unservable(
    config: EngineConfig,
    data_dir: str | Path,
    sources: Mapping[str, ModelSource] | None,
    opener: SourceOpener | None,
) -> None:
    """Refuse, before any rank starts, what the ranks could not serve."""
    tp, pp = config.tensor_parallel_size, config.pipeline_parallel_size
    spawns = (config.spawned_ranks or config.world_size) > 1
    for name, source in (sources or {}).items():
        # Handing a sealed source over would pickle it, data key included, to the other ranks:
        # without an opener to open it there, only plain directories can be handed over.
        if spawns and opener is None and not isinstance(source, DirectorySource):
            raise EngineConfigError(
                f"model {name}: ranks spawned by rank 0 are handed plaintext checkpoint directories"
                f" only (not {type(source).__name__}) unless the engine is given a source_opener"
                " to open the model in each rank (`strongroom serve` and `strongroom engine` pass"
                " one); or set spawned_ranks = 1 and start the other ranks with"
                " `strongroom engine-rank`, each opening the sealed model itself"
            )
    for spec in config.models:
        try:
            ckpt = Checkpoint(model_source(spec, data_dir, sources))
            model_config = ModelConfig.from_hf(ckpt.json("config.json"), ckpt.name)
        except ModelLoadError:
            continue  # loading reports it (or skips the model)
        check_shardable(spec.name, model_config, tp)
        check_stages(spec.name, model_config, pp)
    if (config.spawned_ranks or config.world_size) < config.world_size and not os.environ.get("MASTER_PORT"):
        raise EngineConfigError(
            "ranks started on other hosts need MASTER_ADDR and MASTER_PORT set (the address they join)"
        )
    if dist.is_initialized():
        raise EngineConfigError("torch.distributed is already initialised in this process")
    here = config.spawned_ranks or config.world_size
    first, last = rank_device(config.device, 0), rank_device(config.device, here - 1)
    if last.type == "cuda" and last.index is not None and last.index >= torch.cuda.device_count():
        raise EngineConfigError(
            f"{here} ranks on this host (tensor_parallel_size {tp} x pipeline_parallel_size {pp})"
            f" from {first} need {last}; this host has {torch.cuda.device_count()} GPUs"
        )


def _dead_ranks(procs: list[BaseProcess], place: RankPlace) -> str:
    return "; ".join(
        f"{rank_name(rank, place.tp_size, place.pp_size)} exited (exit code {p.exitcode})"
        for rank, p in enumerate(procs, start=1)
        if p.exitcode is not None
    )


def _stop(procs: list[BaseProcess], wait_s: float = _JOIN_S) -> None:
    for p in procs:
        p.join(wait_s if p.exitcode is None else 0)
        if p.exitcode is None:
            p.kill()
            p.join()
