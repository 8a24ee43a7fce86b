"""casbin's model and enforcer over one policy version: the semantics every decision follows.

``model.conf`` says what a decision is; this wraps a casbin Enforcer holding one ``Policy``
behind a typed interface (pycasbin is untyped and raises bare errors). ``modelMatch`` and
``domainMatch`` are registered on the matcher, and ``domainMatch`` also as the role manager's
domain matching function, so a ``*``-domain role link applies in every domain, as a ``*``-domain
grant does.

The request path never asks casbin a question (it walks every rule per decision: milliseconds at
a thousand rules; its role manager builds each domain's role graph in time quadratic in the
links, seconds at two thousand, on the first question in that domain). ``DecisionTable`` compiles
its tables from an enforcer instead: grants and role links as casbin holds them, applied in a
domain by the function casbin calls. ``allowed`` is plain casbin's answer, which the table is checked
against when it is built (``DecisionTable.check``), in the tests and in the benchmark.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from importlib import resources

import casbin

from policies.pattern import model_match
from policies.policy import ALL_DOMAINS, Assignment, Grant, Policy

__all__ = ["MODEL_CONF", "PolicyEnforcer", "domain_match"]

MODEL_CONF = str(resources.files("policies").joinpath("model.conf"))


def domain_match(request_domain: str, rule_domain: str) -> bool:
    """A rule of ``rule_domain`` applies to a request in ``request_domain``."""
    return rule_domain in (ALL_DOMAINS, request_domain)


_PARSE_LOCK = threading.Lock()
"""casbin parses its matcher with ``ast.parse`` on every question, and CPython's AST constructor
keeps its recursion depth per interpreter, not per thread: two threads parsing at once (tables
built for two replicas, or a watcher's refresh beside an admin change) can fail one of them with
``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905; seen in CI on
3.11.7). One question at a time per process; the request path never asks casbin."""

_MAX_DEPTH = 500
"""casbin follows links recursively, one frame per level: stay well inside Python's stack."""


class PolicyEnforcer:
    """A casbin Enforcer holding ``policy``. casbin follows role links at most
    ``max_hierarchy_level`` deep; the default is as deep as the policy's roles can chain."""

    def __init__(self, policy: Policy, max_hierarchy_level: int | None = None) -> None:
        self.version = policy.version
        enforcer = casbin.Enforcer(MODEL_CONF)
        enforcer.add_function("modelMatch", model_match)
        enforcer.add_function("domainMatch", domain_match)
        role_manager = enforcer.get_role_manager()
        role_manager.max_hierarchy_level = (
            max_hierarchy_level
            if max_hierarchy_level is not None
            else min(len({a.role for a in policy.assignments}) + 1, _MAX_DEPTH)
        )
        enforcer.add_named_domain_matching_func("g", domain_match)
        grants = [[g.role, g.domain, g.pattern, g.action] for g in sorted(policy.grants)]
        links = [[a.member, a.role, a.domain] for a in sorted(policy.assignments)]
        if grants:
            enforcer.add_policies(grants)
        if links:
            enforcer.add_grouping_policies(links)
        self._enforcer = enforcer

    def grants(self) -> list[Grant]:
        """The grants as casbin holds them (its ``p`` rules)."""
        return [
            Grant(role=role, domain=domain, pattern=pattern, action=action)
            for role, domain, pattern, action in self._enforcer.get_policy()
        ]

    def links(self) -> list[Assignment]:
        """The role links as casbin holds them (its ``g`` rules)."""
        return [
            Assignment(member=member, role=role, domain=domain)
            for member, role, domain in self._enforcer.get_grouping_policy()
        ]

    @staticmethod
    def applies_in(rule_domain: str, domain: str) -> bool:
        """Whether a grant or link of ``rule_domain`` applies in ``domain``: the function casbin
        calls as the matcher's domainMatch and as the role manager's domain matching."""
        return domain_match(domain, rule_domain)

    def enforce(self, member: str, domain: str, resource: str, action: str) -> bool:
        with _PARSE_LOCK:
            return bool(self._enforcer.enforce(member, domain, resource, action))

    def allowed(self, members: Iterable[str], domain: str, action: str, resource: str) -> bool:
        """Plain casbin's decision for a caller acting as any of ``members``."""
        return any(self.enforce(m, domain, resource, action) for m in members)
