"""Plain casbin over our model.conf: the reference the fast decision table must agree with.

Used by the property tests and the benchmark, never on the request path: casbin walks every rule
per decision (milliseconds at a thousand rules). ``domain_match`` is registered both as the
matcher's ``domainMatch`` and as the role manager's domain matching function, so a ``*``-domain
role link applies in every domain, as a ``*``-domain grant does.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

import casbin

from policies.pattern import model_match
from policies.policy import ALL_DOMAINS, Policy

__all__ = ["MODEL_CONF", "domain_match", "reference_allowed", "reference_enforcer"]

MODEL_CONF = str(resources.files("policies").joinpath("model.conf"))


def domain_match(request_domain: str, rule_domain: str) -> bool:
    return rule_domain in (ALL_DOMAINS, request_domain)


def reference_enforcer(policy: Policy, max_hierarchy_level: int = 10) -> Any:
    """A fresh casbin Enforcer holding ``policy``. casbin walks at most ``max_hierarchy_level``
    links deep; pass more than the number of roles to compare against unbounded closure."""
    enforcer = casbin.Enforcer(MODEL_CONF)
    enforcer.add_function("modelMatch", model_match)
    enforcer.add_function("domainMatch", domain_match)
    role_manager = enforcer.get_role_manager()
    role_manager.max_hierarchy_level = max_hierarchy_level
    enforcer.add_named_domain_matching_func("g", domain_match)
    grants = [[g.role, g.domain, g.pattern, g.action] for g in policy.grants]
    links = [[a.member, a.role, a.domain] for a in policy.assignments]
    if grants:
        enforcer.add_policies(grants)
    if links:
        enforcer.add_grouping_policies(links)
    return enforcer


def reference_allowed(enforcer: Any, members: Iterable[str], domain: str, action: str, resource: str) -> bool:
    """What plain casbin decides for a caller acting as any of ``members``."""
    return any(bool(enforcer.enforce(m, domain, resource, action)) for m in members)
