"""A loaded policy together with the detectors it switches on: what one scan runs against."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from filters.action import Action, Direction
from filters.context import FilterContext
from filters.policy import FilterPolicy
from filters.scanner import Scanner


class Ruleset:
    def __init__(self, policy: FilterPolicy, scanner: Scanner) -> None:
        self.policy = policy
        self.scanner = scanner
        self._actions: dict[tuple[Direction, tuple[str, ...], str], Mapping[str, Action]] = {}

    def __repr__(self) -> str:
        return f"Ruleset(detectors={self.scanner.names!r}, num_rules={len(self.policy.rules)})"

    def actions_for(self, direction: Direction, ctx: FilterContext) -> Mapping[str, Action]:
        key = (direction, tuple(sorted(set(ctx.roles))), ctx.model)
        actions = self._actions.get(key)
        if actions is None:
            # Read-only: the scanner keeps figures per mapping it is handed (``max_match_len``).
            actions = MappingProxyType(
                self.policy.actions_for(direction, key[1], ctx.model, self.scanner.names)
            )
            if len(self._actions) < 4096:
                self._actions[key] = actions
        return actions
