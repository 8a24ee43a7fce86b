"""Counts of findings by (type, action), turned into audit findings: never the values."""

from __future__ import annotations

from collections import Counter

from common.finding import Finding
from filters.action import Action, Direction


class FindingTally:
    __slots__ = ("_counts", "direction")

    def __init__(self, direction: Direction) -> None:
        self.direction = direction
        self._counts: Counter[tuple[str, Action]] = Counter()

    def add(self, detector: str, action: Action, count: int = 1) -> None:
        self._counts[(detector, action)] += count

    def merge(self, other: FindingTally) -> None:
        self._counts.update(other._counts)

    @property
    def is_blocking(self) -> bool:
        return any(action is Action.BLOCK for _, action in self._counts)

    def findings(self) -> tuple[Finding, ...]:
        return tuple(
            Finding(type=name, count=count, action=action.value, direction=self.direction.value)
            for (name, action), count in sorted(self._counts.items())
        )
