"""One step as the other tensor-parallel ranks need it: per model, what each sequence computes.

Rank 0 owns the scheduler, the block pool and prefix caching; a block id means the same on every
rank (each rank's pool has the same number of blocks, each block holding that rank's KV heads).
So a step is fully described by, per model in the order rank 0 runs them, each scheduled
sequence's new input tokens, where they start, its block table and whether it samples:

    StepPlan = [(model name, [(start, input_ids, block_ids, is_sampling), ...]), ...]

Plain lists and tuples, so the pickle that carries them is small and fast. Only the new input
tokens travel, not the whole sequence; ``PlannedSeq`` answers the runner's reads of
``seq.token_ids`` at absolute positions from that window.
"""

from __future__ import annotations

from typing import NamedTuple

from engine.core.scheduler import ScheduledSeq

__all__ = ["PlannedSeq", "StepPlan", "plan_items", "to_plan"]

PlanItem = tuple[int, list[int], list[int], bool]
StepPlan = list[tuple[str, list[PlanItem]]]


def to_plan(items: list[ScheduledSeq]) -> list[PlanItem]:
    """Rank 0's scheduled items for one model as plan items (all input tokens are on the host)."""
    return [
        (
            item.start,
            item.seq.token_ids[item.start : item.start + item.num_new_tokens],
            item.seq.block_ids,
            item.is_sampling,
        )
        for item in items
    ]


class _TokenWindow:
    """``token_ids[offset : offset + len(values)]`` readable at absolute positions."""

    __slots__ = ("offset", "values")

    def __init__(self, offset: int, values: list[int]) -> None:
        self.offset, self.values = offset, values

    def __len__(self) -> int:
        return self.offset + len(self.values)

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self.values[index.start - self.offset : index.stop - self.offset]
        return self.values[index - self.offset]


class _PlannedTokens(NamedTuple):
    token_ids: _TokenWindow
    block_ids: list[int]


class PlannedSeq(NamedTuple):
    """A plan item in the shape the runner reads a ``ScheduledSeq``."""

    seq: _PlannedTokens
    start: int
    num_new_tokens: int
    is_sampling: bool


def plan_items(items: list[PlanItem]) -> list[PlannedSeq]:
    return [
        PlannedSeq(_PlannedTokens(_TokenWindow(start, ids), blocks), start, len(ids), sampling)
        for start, ids, blocks, sampling in items
    ]
