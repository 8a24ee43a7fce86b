"""The decision table must decide exactly as plain casbin over the same model.conf."""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import Assignment, DecisionTable, Grant, Policy, PolicyChange, apply_changes
from policies.enforcer import PolicyEnforcer
from policies.errors import PolicyConflictError, PolicyError, PolicyNotFoundError

ROLES = ["r0", "r1", "r2", "r3", "r4"]
USERS = ["user:u0", "user:u1"]
DOMAINS = ["*", "d0", "d1"]
PATTERNS = ["m0", "m0-*", "m*x", "org/*", "*/x", "org/m1", "q-*", "*"]
MODELS = ["m0", "m0-x", "m0-xy", "m0x", "org/m1", "org/m1/x", "q-1", "*"]
ACTIONS = ["chat", "embedding", "admin:policy"]


def _grant(role: str, pattern: str, action: str, domain: str) -> Grant:
    return Grant(
        role=role, pattern="*" if action == "admin:policy" else pattern, action=action, domain=domain
    )


grants = st.builds(
    _grant,
    st.sampled_from(ROLES),
    st.sampled_from(PATTERNS),
    st.sampled_from(ACTIONS),
    st.sampled_from(DOMAINS),
)
assignments = (
    st.tuples(st.sampled_from(USERS + ROLES), st.sampled_from(ROLES), st.sampled_from(DOMAINS))
    .filter(lambda t: t[0] != t[1])
    .map(lambda t: Assignment(member=t[0], role=t[1], domain=t[2]))
)
policies = st.builds(
    lambda g, a: Policy(version=1, grants=frozenset(g), assignments=frozenset(a)),
    st.lists(grants, max_size=12),
    st.lists(assignments, max_size=10),
)
changes = st.lists(
    st.one_of(
        st.builds(lambda r: PolicyChange(op="grant", rule=r), grants),
        st.builds(lambda r: PolicyChange(op="ungrant", rule=r), grants),
        st.builds(lambda r: PolicyChange(op="assign", rule=r), assignments),
        st.builds(lambda r: PolicyChange(op="unassign", rule=r), assignments),
    ),
    max_size=5,
)
CALLERS = [(m,) for m in USERS + ROLES] + [("user:u0", "r1"), ("user:u1", "r0", "r3")]


def _assert_same_decisions(policy: Policy) -> None:
    table = DecisionTable(policy)
    enforcer = PolicyEnforcer(policy, max_hierarchy_level=32)
    for members, domain, action, model in product(CALLERS, [*DOMAINS, "d9"], ACTIONS, MODELS):
        expected = enforcer.allowed(members, domain, action, model)
        assert table.allows(members, domain, action, model) is expected, (members, domain, action, model)
        # asked twice: the memoised answer must be the same
        assert table.allows(members, domain, action, model) is expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies, changes)
def test_fast_decisions_equal_plain_casbin(policy: Policy, edits: list[PolicyChange]) -> None:
    _assert_same_decisions(policy)
    for edit in edits:
        try:
            policy = apply_changes(policy, [edit])
        except (PolicyConflictError, PolicyNotFoundError):
            continue
        _assert_same_decisions(policy)


def test_inheritance_deeper_than_casbin_default_is_followed() -> None:
    # casbin stops after 10 links by default; our closure does not, so the reference is run deeper.
    chain = [Assignment(member=f"r{i}", role=f"r{i + 1}") for i in range(12)]
    policy = Policy(
        grants=frozenset({Grant(role="r12", pattern="m", action="chat")}), assignments=frozenset(chain)
    )
    assert DecisionTable(policy).allows(("r0",), "*", "chat", "m")
    assert PolicyEnforcer(policy).allowed(["r0"], "*", "chat", "m")  # as deep as the roles chain
    assert not PolicyEnforcer(policy, max_hierarchy_level=10).allowed(["r0"], "*", "chat", "m")


def test_a_table_that_disagrees_with_casbin_is_refused() -> None:
    """The table is checked against casbin's own answers when it is built: here casbin holds a
    policy where r0 lost its grant, so the table's "allowed" is caught."""
    policy = Policy(
        version=3,
        grants=frozenset({Grant(role="r1", pattern="m-*", action="chat")}),
        assignments=frozenset({Assignment(member="r0", role="r1", domain="d1")}),
    )
    table = DecisionTable(policy)  # agrees: built and checked without error
    assert table.allows(("r0",), "d1", "chat", "m-7b") and not table.allows(("r0",), "*", "chat", "m-7b")
    table.enforcer = PolicyEnforcer(Policy(version=3, grants=policy.grants))
    with pytest.raises(PolicyError, match=r"disagree on \(r0, d1, m-\*, chat\); casbin says False"):
        table.check()
