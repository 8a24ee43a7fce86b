"""The policy compiled into a lookup table, so one decision costs a dict lookup or a regex match.

Plain casbin walks every rule per decision. Here, once per policy version:

    (member, domain)          -> role closure   (every role reachable through links valid in the
                                                 domain, i.e. links of that domain or of '*')
    (closure, domain, action) -> ModelPatternSet of the grants whose role is in the closure and
                                 whose domain is that domain or '*'

Closures are walked without casbin's depth limit (10 links). The pattern sets of a caller (its
user plus its token roles) are compiled on first use and kept for the version; decisions are
memoised per (caller, domain, action, resource) up to ``cache_size``. A table is immutable: a
policy change builds a new one and swaps it in, so a decision never sees half a change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from policies.pattern import ModelPatternSet
from policies.policy import ALL_DOMAINS, Grant, Policy

__all__ = ["DecisionTable"]

_Key = tuple[tuple[str, ...], str]


class DecisionTable:
    def __init__(self, policy: Policy, cache_size: int = 100_000) -> None:
        self.policy = policy
        self.version = policy.version
        self._cache_size = cache_size
        self._links: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for a in policy.assignments:
            self._links[a.domain][a.member].add(a.role)
        self._grants: dict[tuple[str, str], list[Grant]] = defaultdict(list)
        for g in policy.grants:
            self._grants[(g.role, g.domain)].append(g)
        self._closures: dict[tuple[str, str], frozenset[str]] = {}
        self._pattern_sets: dict[_Key, dict[str, ModelPatternSet]] = {}
        self._decisions: dict[tuple[tuple[str, ...], str, str, str], bool] = {}
        self._precompute()

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
            scopes = [self._links[ALL_DOMAINS]]
            if domain != ALL_DOMAINS and domain in self._links:
                scopes.append(self._links[domain])
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
        domains = {ALL_DOMAINS, domain}
        return sorted(
            g
            for role in self.roles_of(members, domain)
            for d in domains
            for g in self._grants.get((role, d), ())
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
