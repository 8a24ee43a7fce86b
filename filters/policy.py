"""The filter policy: an action per detector, overridden by rules on direction, role and model.

    [actions]                      # base action of each detector, both directions
    payment_card = "mask"

    [[rules]]                      # later rules override earlier ones
    detectors = ["payment_card"]   # "*" for all
    direction = "response"         # "request" | "response" | "both"
    roles = ["risk-analyst"]       # caller has any of them; omitted = everyone
    models = ["qwen-*"]            # fnmatch, anchored at both ends; omitted = every model
    action = "flag"

A detector the policy does not name runs with ``default_action`` (``redact``): leaving a
detector out never switches it off, only ``"off"`` does.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

import msgspec

from filters.action import Action, Direction
from filters.errors import PolicyError

_ON_ERROR = (Action.BLOCK, Action.REDACT)


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    action: Action
    """Action applied to the detectors below when the rule matches."""
    detectors: tuple[str, ...] = ("*",)
    """Detector names the rule changes; ``*`` is every detector."""
    direction: str = "both"
    """``request``, ``response`` or ``both``."""
    roles: tuple[str, ...] = ()
    """The rule applies if the caller has any of these roles; empty means every caller."""
    models: tuple[str, ...] = ()
    """Model name globs (anchored); empty means every model."""

    def __post_init__(self) -> None:
        if self.direction not in ("request", "response", "both"):
            raise ValueError(f"rule direction must be request, response or both, not {self.direction!r}")

    def applies(self, direction: Direction, roles: tuple[str, ...], model: str) -> bool:
        if self.direction != "both" and self.direction != direction:
            return False
        if self.roles and not set(self.roles).intersection(roles):
            return False
        return not self.models or any(fnmatch.fnmatchcase(model, glob) for glob in self.models)


class KeywordLists(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    files: tuple[str, ...] = ()
    """Term files, one per line; relative to the policy file's folder."""
    max_gap: int = 3
    """Separators allowed, on average, between two characters of a term ("b.o.m.b")."""


class FilterPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int = 1
    """Format version of the policy file."""
    default_action: Action = Action.REDACT
    """Action of a detector the policy does not name."""
    on_error: Action = Action.BLOCK
    """What a detector that raises or runs out of time turns into: ``block`` or ``redact``
    (the whole text)."""
    actions: dict[str, Action] = msgspec.field(default_factory=dict)
    """Base action per detector name."""
    rules: tuple[Rule, ...] = ()
    """Overrides, applied in order; the last matching rule wins."""
    keywords: KeywordLists = msgspec.field(default_factory=KeywordLists)
    """Sensitive-word lists (detector ``keyword``)."""
    injection: KeywordLists = msgspec.field(default_factory=KeywordLists)
    """Prompt-injection phrase lists (detector ``prompt_injection``)."""

    def __post_init__(self) -> None:
        if self.on_error not in _ON_ERROR:
            raise ValueError("on_error must be block or redact: a failed detector fails closed")

    def actions_for(
        self, direction: Direction, roles: tuple[str, ...], model: str, detectors: tuple[str, ...]
    ) -> Mapping[str, Action]:
        """The action of every named detector for one caller."""
        resolved = {name: self.actions.get(name, self.default_action) for name in detectors}
        for rule in self.rules:
            if rule.applies(direction, roles, model):
                for name in detectors:
                    if "*" in rule.detectors or name in rule.detectors:
                        resolved[name] = rule.action
        return resolved


def parse_policy(data: bytes | str, *, source: str = "policy") -> FilterPolicy:
    try:
        return msgspec.toml.decode(data, type=FilterPolicy)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
        raise PolicyError(f"invalid filter policy {source}: {exc}") from exc
