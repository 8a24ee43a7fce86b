import random

from filters.action import Action
from filters.scanner import Match, _settle


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
