"""A rank other than 0: load its shard of every model, then run the steps rank 0 plans.

The process has no scheduler and samples nothing: it holds its slice of the weights (its
pipeline stage's layers, split by its tensor-parallel rank) and a KV pool with as many blocks as
rank 0's (its own KV heads of its own layers in each), and for every plan it receives runs the
same forward passes as rank 0, taking part in their collectives and passing activations on. A
``None`` plan stops it; any error ends the process, which rank 0 notices
(``engine.worker.rank_group``). Rank 0 spawns it (``run_rank``), or another host starts it
(``strongroom engine-rank``, through ``run_rank`` too). Either way a sealed model is opened here,
through the key provider: rank 0 hands a spawned rank a ``SourceOpener``, never a sealed source.
"""

from __future__ import annotations

from typing import Any

import msgspec
import torch
import torch.distributed as dist

from engine.config import EngineConfig
from engine.loading.hosted_model import HostedModel, load_hosted_models
from engine.loading.model_source import ModelSource
from engine.loading.source_opener import SourceOpener
from engine.worker.distributed import RankPlace, join, leave, rank_device
from engine.worker.kv_cache import KVCache
from engine.worker.model_runner import ModelRunner
from engine.worker.pipeline_runner import PipelineRunner
from engine.worker.plan_channel import PlanChannel
from engine.worker.step_plan import StepPlan, plan_items

__all__ = ["run_rank"]


def run_rank(
    rank: int,
    config: EngineConfig,
    data_dir: str,
    sources: dict[str, ModelSource],
    address: str,
    local_rank: int | None = None,
    key_operations: list[Any] | None = None,
    opener: SourceOpener | None = None,
) -> None:
    """Serve as ``rank`` until rank 0 stops; ``local_rank`` (default ``rank``) picks the GPU on this
    host. ``key_operations`` (msgpack values) go to rank 0, which reports them as its own.
    ``opener`` (a rank spawned to serve sealed models) opens the sources here, in place of
    ``sources`` and ``key_operations``."""
    device = rank_device(config.device, rank if local_rank is None else local_rank)
    if config.num_threads is not None and device.type == "cpu":
        torch.set_num_threads(config.num_threads)
    me = RankPlace(rank, config.tensor_parallel_size, config.pipeline_parallel_size)
    plans = join(me, device, address, config.distributed_timeout_s)
    try:
        unopened: dict[str, str] = {}
        if opener is not None:
            # After joining, so that a model that does not open here (a bad key) fails rank 0's
            # start with its reason, through the store, rather than as an exit code.
            sources, unopened, key_operations = opener(config)
        plans.put(f"key_operations/{rank}", key_operations or [])
        models, failed = _load(config, data_dir, sources, device, unopened)
        served: list[str] = plans.get("served")
        missing = [name for name in served if name not in models]
        if missing:
            plans.put(f"blocks/{rank}", f"could not load {missing}: {[failed.get(m) for m in missing]}")
            return
        hosted = [models[name] for name in served]
        block_bytes = KVCache.block_bytes_for(hosted, config.block_size)
        plans.put(f"blocks/{rank}", KVCache.num_blocks_for(config, hosted, block_bytes, device))
        kv_cache = KVCache(plans.get("blocks"), block_bytes, config.block_size, device)  # the smallest
        runners: dict[str, ModelRunner] = {}
        for model in hosted:
            kv_cache.bind(model)
            runners[model.name] = (
                PipelineRunner(model, config.block_size, device, place=me)
                if me.pp_size > 1
                else ModelRunner(model, config.block_size, device, fused=False)
            )
        _serve(plans, runners)
    finally:
        leave()


def _load(
    config: EngineConfig,
    data_dir: str,
    sources: dict[str, ModelSource],
    device: torch.device,
    unopened: dict[str, str],
) -> tuple[dict[str, HostedModel], dict[str, str]]:
    """The models that opened, loaded; the reasons of those that did not open or load. A model
    that did not open is not loaded at all: it would fall back to reading its plain directory."""
    opened = tuple(spec for spec in config.models if spec.name not in unopened)
    if not opened:
        return {}, dict(unopened)
    config = msgspec.structs.replace(config, models=opened)
    models, failed = load_hosted_models(config, data_dir, sources, device, skip_failed=True)
    return models, {**failed, **unopened}


@torch.inference_mode()
def _serve(plans: PlanChannel, runners: dict[str, ModelRunner]) -> None:
    while True:
        try:
            plan: StepPlan | None = plans.receive()
        except dist.DistError as exc:
            raise SystemExit(f"engine rank 0 went away: {exc}") from None
        if plan is None:
            return
        for model, items in plan:
            runners[model].execute(plan_items(items))  # type: ignore[arg-type]
