"""One edit of the policy, and applying a batch of them all together or not at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from policies.errors import InvalidPolicyError, PolicyConflictError, PolicyNotFoundError
from policies.policy import Assignment, Grant, Policy

__all__ = ["PolicyChange", "apply_changes"]

Op = Literal["grant", "ungrant", "assign", "unassign"]


class PolicyChange(msgspec.Struct, frozen=True, kw_only=True):
    """Add or remove one grant (``grant``/``ungrant``) or one assignment (``assign``/``unassign``)."""

    op: Op
    rule: Grant | Assignment

    def __post_init__(self) -> None:
        wants_grant = self.op in ("grant", "ungrant")
        if wants_grant != isinstance(self.rule, Grant):
            raise InvalidPolicyError(f"operation {self.op!r} does not take a {type(self.rule).__name__}")

    @property
    def adds(self) -> bool:
        return self.op in ("grant", "assign")

    def describe(self) -> str:
        return f"{self.op} {', '.join(self.rule.as_line())}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "rule": msgspec.to_builtins(self.rule)}


def apply_changes(policy: Policy, changes: Sequence[PolicyChange]) -> Policy:
    """The policy after every change, at the next version; raises (changing nothing) on the first
    change that cannot apply: adding what exists (409) or removing what does not (404)."""
    if not changes:
        raise InvalidPolicyError("a policy change needs at least one operation")
    grants = set(policy.grants)
    assignments = set(policy.assignments)
    for change in changes:
        rule = change.rule
        target: set[Any] = grants if isinstance(rule, Grant) else assignments
        line = ", ".join(rule.as_line())
        if change.adds:
            if rule in target:
                raise PolicyConflictError(f"already in the policy: {line}")
            target.add(rule)
        else:
            if rule not in target:
                raise PolicyNotFoundError(f"not in the policy: {line}")
            target.remove(rule)
    return Policy(version=policy.version + 1, grants=frozenset(grants), assignments=frozenset(assignments))
