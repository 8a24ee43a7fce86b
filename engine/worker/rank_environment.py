"""A rank started on its own, not spawned by rank 0: where it sits and where to join, from the
environment variables torchrun sets.

    MASTER_ADDR, MASTER_PORT   rank 0's host and the port its rendezvous store listens on
    RANK, WORLD_SIZE           this rank, of tensor_parallel_size x pipeline_parallel_size
    LOCAL_RANK                 its GPU on this host (default 0)

Rank 0 (``strongroom serve`` or ``strongroom engine``, with ``spawned_ranks`` below the world
size and the same MASTER_ADDR and MASTER_PORT) waits for such ranks instead of spawning them;
each runs ``strongroom engine-rank`` with the same ``[engine]`` settings, its models at the same
paths under its own data directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.errors import EngineConfigError

__all__ = ["RankEnvironment"]


@dataclass(frozen=True, slots=True)
class RankEnvironment:
    rank: int
    world_size: int
    local_rank: int
    address: str
    """``host:port`` of rank 0's rendezvous store."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankEnvironment:
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if not environ.get(v)]
        if missing:
            raise EngineConfigError(f"an engine rank needs {', '.join(missing)} in its environment")
        numbers = {}
        for var in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            value = environ.get(var) or "0"
            if not value.isdigit():
                raise EngineConfigError(f"{var} must be a non-negative integer, not {value!r}")
            numbers[var] = int(value)
        return cls(
            rank=numbers["RANK"],
            world_size=numbers["WORLD_SIZE"],
            local_rank=numbers["LOCAL_RANK"],
            address=f"{environ['MASTER_ADDR']}:{numbers['MASTER_PORT']}",
        )

    def check(self, config: EngineConfig) -> None:
        """Refuse a rank the configured instance has no place for (rank 0 is the engine itself)."""
        if self.world_size != config.world_size:
            raise EngineConfigError(
                f"WORLD_SIZE {self.world_size} is not tensor_parallel_size {config.tensor_parallel_size}"
                f" x pipeline_parallel_size {config.pipeline_parallel_size} = {config.world_size}"
            )
        if not 1 <= self.rank < self.world_size:
            raise EngineConfigError(
                f"RANK {self.rank} must be in [1, {self.world_size - 1}]: rank 0 is the engine itself"
            )
