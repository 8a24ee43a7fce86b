"""Decision cost at the issue's scale: 1,000 policy lines, 2,000 role links, p50 <= 20 µs."""

from __future__ import annotations

import random
import statistics
import time

from policies import Assignment, DecisionTable, Grant, Policy


def test_p50_decision_under_20_microseconds() -> None:
    rng = random.Random(1)
    roles = [f"r{i}" for i in range(200)]
    models = [f"f{i}/m{j}" for i in range(20) for j in range(10)]
    grants: set[Grant] = set()
    while len(grants) < 1000:
        pattern = rng.choice(models) if rng.random() < 0.7 else f"f{rng.randrange(20)}/*"
        grants.add(Grant(role=rng.choice(roles), pattern=pattern, action=rng.choice(["chat", "embedding"])))
    links: set[Assignment] = set()
    while len(links) < 2000:
        i = rng.randrange(199)
        member = roles[i] if len(links) < 400 else f"user:u{rng.randrange(500)}"
        links.add(Assignment(member=member, role=roles[rng.randrange(i + 1, 200)]))
    table = DecisionTable(Policy(grants=frozenset(grants), assignments=frozenset(links)))
    callers = [(f"user:u{rng.randrange(500)}", rng.choice(roles)) for _ in range(100)]
    queries = [(rng.choice(callers), rng.choice(models) + ("" if k % 2 else f"-{k}")) for k in range(5000)]
    samples = []
    for members, model in queries:
        t0 = time.perf_counter_ns()
        table.allows(members, "*", "chat", model)
        samples.append(time.perf_counter_ns() - t0)
    p50_us = statistics.median(samples) / 1000
    assert p50_us <= 20, f"p50 {p50_us:.1f} µs"
    assert any(table.allows(m, "*", "chat", q) for m, q in queries)  # the workload is not all-deny
