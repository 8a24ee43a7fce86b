import random
from pathlib import Path
from types import MappingProxyType

import pytest
from filter_fixtures import make_pipeline, write_policy

from filters import Direction, FilterContext
from filters.action import Action
from filters.detectors import builtin_detectors
from filters.scanner import Match, Scanner, _settle


def _settle_by_pairs(found: list[tuple[int, int, int, str, Action]]) -> list[Match]:
    """The definition: best first, keep a span unless it overlaps one already kept."""
    kept: list[Match] = []
    for start, end, _, name, action in sorted(found, key=lambda f: (-f[2], f[0] - f[1], f[0])):
        if all(end <= k.start or start >= k.end for k in kept):
            kept.append(Match(start, end, name, action))
    return sorted(kept)


def test_higher_priority_then_longer_span_wins() -> None:
    found = [
        (0, 4, 10, "phone", Action.REDACT),
        (2, 9, 50, "card", Action.MASK),
        (9, 12, 10, "ip", Action.FLAG),
    ]
    assert _settle(found) == [Match(2, 9, "card", Action.MASK), Match(9, 12, "ip", Action.FLAG)]
    assert _settle([(0, 3, 5, "a", Action.FLAG), (1, 6, 5, "b", Action.FLAG)]) == [
        Match(1, 6, "b", Action.FLAG)
    ]


def test_settle_equals_the_pairwise_definition() -> None:
    rng = random.Random(5)
    for _ in range(5_000):
        found = []
        for _ in range(rng.randint(0, 12)):
            start = rng.randint(0, 30)
            end = start + rng.choice([1, 2, 3, 5, 8])  # a span is never empty
            found.append((start, end, rng.choice([10, 20, 50]), rng.choice("xyz"), Action.REDACT))
        assert _settle(list(found)) == _settle_by_pairs(found)


def test_settle_drops_empty_spans() -> None:
    assert _settle([(3, 3, 50, "x", Action.REDACT), (0, 1, 5, "y", Action.FLAG)]) == [
        Match(0, 1, "y", Action.FLAG)
    ]


def test_max_match_len_follows_a_dict_that_changes_and_holds_for_a_read_only_mapping() -> None:
    scanner = Scanner(builtin_detectors())
    actions = dict.fromkeys(scanner.names, Action.OFF)
    assert scanner.max_match_len(actions, rewriting_only=False) == 1
    longest = max(d.max_match_len for d in scanner.detectors)
    actions.update(dict.fromkeys(scanner.names, Action.FLAG))  # a dict's owner may change it
    assert scanner.max_match_len(actions, rewriting_only=False) == longest
    assert scanner.max_match_len(actions, rewriting_only=True) == 1
    fixed = MappingProxyType(dict.fromkeys(scanner.names, Action.REDACT))
    for _ in range(2):  # worked out once, then remembered
        assert scanner.max_match_len(fixed, rewriting_only=True) == longest


def test_the_ruleset_hands_out_read_only_actions(tmp_path: Path) -> None:
    ruleset = make_pipeline(write_policy(tmp_path)).ruleset
    actions = ruleset.actions_for(Direction.RESPONSE, FilterContext(roles=("user",), model="m"))
    with pytest.raises(TypeError):
        actions["email"] = Action.OFF  # type: ignore[index]
