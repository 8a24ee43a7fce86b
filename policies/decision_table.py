"""casbin's decisions compiled into a lookup table, so one costs a dict lookup or a regex match.

Plain casbin walks every rule per decision. Here, once per policy version, from the casbin
enforcer that holds it (``policies.enforcer``: the model, its role manager, its matching
functions; the table keeps no rules of its own):

    (member, domain)          -> role closure   (every role reachable through casbin's links that
                                                 its domainMatch applies in the domain)
    (closure, domain, action) -> ModelPatternSet of casbin's grants whose role is in the closure
                                 and whose domain casbin's domainMatch applies in that domain

What remains of the matcher, ``r.act == p.act && modelMatch(r.obj, p.obj)``, is the pattern set
per action, built on the same ``model_match``. When it is built, the table is checked against
casbin's own ``enforce`` on every question a small policy can be asked (``check``): a table that
disagrees is not taken into use. The pattern sets of a caller (its
user plus its token roles) are compiled on first use and kept for the version; decisions are
memoised per (caller, domain, action, resource) up to ``cache_size``. A table is immutable: a
policy change builds a new one and swaps it in, so a decision never sees half a change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from policies.enforcer import PolicyEnforcer
from policies.errors import PolicyError
from policies.pattern import ModelPatternSet
from policies.policy import ALL_DOMAINS, CONTROL_RESOURCE, INFERENCE_ACTIONS, Grant, Policy

__all__ = ["DecisionTable"]

_Key = tuple[tuple[str, ...], str]

_MAX_CHECKED = 50_000
"""Questions times rules: the largest policy checked question by question against casbin (about
a quarter of a second of casbin's time)."""


class DecisionTable:
    def __init__(self, policy: Policy, cache_size: int = 100_000) -> None:
        self.policy = policy
        self.version = policy.version
        self._cache_size = cache_size
        self.enforcer = PolicyEnforcer(policy)
        self._links: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for a in self.enforcer.links():
            self._links[a.domain][a.member].add(a.role)
        self._grants: dict[str, list[Grant]] = defaultdict(list)
        for g in self.enforcer.grants():
            self._grants[g.role].append(g)
        self._closures: dict[tuple[str, str], frozenset[str]] = {}
        self._pattern_sets: dict[_Key, dict[str, ModelPatternSet]] = {}
        self._decisions: dict[tuple[tuple[str, ...], str, str, str], bool] = {}
        self._precompute()
        self.check()

    def _precompute(self) -> None:
        domains = (
            {ALL_DOMAINS}
            | {a.domain for a in self.policy.assignments}
            | {g.domain for g in self.policy.grants}
        )
        roles = {g.role for g in self.policy.grants} | {a.role for a in self.policy.assignments}
        for domain in domains:
            for role in roles:
                self._pattern_set_of((role,), domain)

    def closure(self, member: str, domain: str) -> frozenset[str]:
        """``member`` and every role it holds in ``domain``, directly or through inheritance."""
        key = (member, domain)
        found = self._closures.get(key)
        if found is None:
            # Followed without casbin's depth limit, so a long chain cannot silently end early.
            applies_in = self.enforcer.applies_in
            scopes = [links for d, links in self._links.items() if applies_in(d, domain)]
            seen = {member}
            frontier = [member]
            while frontier:
                current = frontier.pop()
                for scope in scopes:
                    for role in scope.get(current, ()):
                        if role not in seen:
                            seen.add(role)
                            frontier.append(role)
            found = self._closures[key] = frozenset(seen)
        return found

    def roles_of(self, members: Iterable[str], domain: str) -> frozenset[str]:
        out: set[str] = set()
        for m in members:
            out |= self.closure(m, domain)
        return frozenset(out)

    def grants_of(self, members: Iterable[str], domain: str) -> list[Grant]:
        """Every grant that applies to a caller acting as ``members`` in ``domain``."""
        applies_in = self.enforcer.applies_in
        return sorted(
            g
            for role in self.roles_of(members, domain)
            for g in self._grants.get(role, ())
            if applies_in(g.domain, domain)
        )

    def _pattern_set_of(self, members: tuple[str, ...], domain: str) -> dict[str, ModelPatternSet]:
        key = (members, domain)
        sets = self._pattern_sets.get(key)
        if sets is None:
            by_action: dict[str, set[str]] = defaultdict(set)
            for g in self.grants_of(members, domain):
                by_action[g.action].add(g.pattern)
            sets = {action: ModelPatternSet(patterns) for action, patterns in by_action.items()}
            if len(self._pattern_sets) >= self._cache_size:
                self._pattern_sets.clear()
            self._pattern_sets[key] = sets
        return sets

    def allows(self, members: tuple[str, ...], domain: str, action: str, resource: str) -> bool:
        """Whether a caller acting as any of ``members`` may perform ``action`` on ``resource``."""
        key = (members, domain, action, resource)
        decision = self._decisions.get(key)
        if decision is None:
            patterns = self._pattern_set_of(members, domain).get(action)
            decision = patterns is not None and patterns.matches(resource)
            if len(self._decisions) >= self._cache_size:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def check(self) -> None:
        """Ask casbin every question this policy can tell apart (each member and role, domain,
        action and pattern, as the caller alone) and raise PolicyError where the table answers
        otherwise. Skipped above ``_MAX_CHECKED``: casbin's cost grows with questions times rules."""
        p = self.policy
        members = (
            {a.member for a in p.assignments} | {a.role for a in p.assignments} | {g.role for g in p.grants}
        )
        domains = {ALL_DOMAINS} | {a.domain for a in p.assignments} | {g.domain for g in p.grants}
        actions = INFERENCE_ACTIONS | {g.action for g in p.grants}
        objects = {g.pattern for g in p.grants} | {CONTROL_RESOURCE}
        num_questions = len(members) * len(domains) * len(actions) * len(objects)
        if num_questions * (len(p.grants) + len(p.assignments) + 1) > _MAX_CHECKED:
            return
        for member in sorted(members):
            for domain in sorted(domains):
                for action in sorted(actions):
                    for resource in sorted(objects):
                        expected = self.enforcer.enforce(member, domain, resource, action)
                        if self.allows((member,), domain, action, resource) != expected:
                            raise PolicyError(
                                f"policy version {self.version}: the decision table and casbin disagree on "
                                f"({member}, {domain}, {resource}, {action}); casbin says {expected}"
                            )
