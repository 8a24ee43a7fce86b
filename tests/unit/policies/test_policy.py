from __future__ import annotations

import pytest

from policies import Assignment, Grant, InvalidPolicyError, Policy, PolicyChange, apply_changes
from policies.errors import PolicyConflictError, PolicyNotFoundError


def test_csv_round_trip() -> None:
    text = "p, analyst, *, demo-chat, chat\np, ops, acme, org/*, embedding\ng, user:alice, ops, acme\n"
    policy = Policy.from_csv(text)
    assert Policy.from_csv(policy.to_csv()) == policy
    assert Grant(role="ops", domain="acme", pattern="org/*", action="embedding") in policy.grants


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"role": "user:bob", "pattern": "m", "action": "chat"}, "role 'user:bob' is invalid"),
        ({"role": "a", "pattern": "m", "action": "delete"}, "action 'delete' is unknown"),
        ({"role": "a", "pattern": "m m", "action": "chat"}, "model pattern 'm m' is invalid"),
        ({"role": "a", "pattern": "", "action": "chat"}, "model pattern '' is invalid"),
        ({"role": "a", "pattern": "demo", "action": "admin:policy"}, "pattern must be '*'"),
        ({"role": "a", "pattern": "m", "action": "chat", "domain": "a b"}, "domain 'a b' is invalid"),
    ],
)
def test_invalid_grants_say_what_is_wrong(kwargs: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidPolicyError, match=words) as info:
        Grant(**kwargs)
    assert info.value.status_code == 400


def test_invalid_assignments() -> None:
    with pytest.raises(InvalidPolicyError, match="itself"):
        Assignment(member="admin", role="admin")
    with pytest.raises(InvalidPolicyError, match="subject must be"):
        Assignment(member="user:a,b", role="admin")
    with pytest.raises(InvalidPolicyError, match="policy line 1"):
        Policy.from_csv("p, only, three\n")


def test_apply_changes_is_all_or_nothing() -> None:
    policy = Policy.from_csv("p, analyst, *, demo-chat, chat\n", version=3)
    new = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="x", action="chat"))
    dup = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-chat", action="chat"))
    with pytest.raises(PolicyConflictError):
        apply_changes(policy, [new, dup])
    assert len(policy.grants) == 1  # the value was never touched
    gone = PolicyChange(op="unassign", rule=Assignment(member="user:x", role="analyst"))
    with pytest.raises(PolicyNotFoundError):
        apply_changes(policy, [gone])
    after = apply_changes(policy, [new])
    assert after.version == 4 and len(after.grants) == 2
    with pytest.raises(InvalidPolicyError):
        PolicyChange(op="assign", rule=Grant(role="a", pattern="x", action="chat"))
