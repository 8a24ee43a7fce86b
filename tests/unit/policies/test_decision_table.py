"""At the issue's scale (1,000 policy lines, 2,000 role links) the decision table decides as casbin.

How fast it decides is measured by ``python -m bench.policies.authz_decision`` (p50 target 20 µs, figures
in bench/BENCHMARKS.md), not asserted here: a shared test machine makes timing flaky.
"""

from __future__ import annotations

import random

from policies import Assignment, DecisionTable, Grant, Policy
from policies.enforcer import PolicyEnforcer


def test_a_policy_at_scale_decides_as_casbin() -> None:
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
    policy = Policy(grants=frozenset(grants), assignments=frozenset(links))
    table = DecisionTable(policy)
    enforcer = PolicyEnforcer(policy, max_hierarchy_level=256)
    callers = [(f"user:u{rng.randrange(500)}", rng.choice(roles)) for _ in range(100)]
    queries = [(rng.choice(callers), rng.choice(models) + ("" if k % 2 else f"-{k}")) for k in range(200)]
    decisions = [table.allows(members, "*", "chat", model) for members, model in queries]
    assert decisions == [enforcer.allowed(members, "*", "chat", model) for members, model in queries]
    assert any(decisions) and not all(decisions)  # the workload is neither all-deny nor all-allow
