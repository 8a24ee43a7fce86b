"""The one authorization function for inference, /v1/models, and the admin and audit APIs.

Deny by default: a caller may do only what a grant to one of its roles allows. A caller acts as
its user (``user:<sub>``, which may hold roles assigned in the policy) and as each role in its
token; its domain is its tenant, or ``*`` (global grants only) when it has none. Token roles that
are not valid role names are ignored, so a token cannot smuggle in ``user:someone-else``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from audit.sink import AuditSink
from gateway.auth.principal import Principal
from policies.config import AccessConfig
from policies.control_scope import ControlScope
from policies.decision_table import DecisionTable
from policies.policy import ALL_DOMAINS, CONTROL_RESOURCE, Grant, Policy, is_role_name, user_member
from policies.policy_change import PolicyChange
from policies.policy_store import PolicyStore
from policies.policy_watcher import PolicyWatcher

__all__ = ["Authorizer", "default_policy"]


def default_policy() -> Policy:
    """The packaged ``policies/policy.csv``."""
    return Policy.from_csv(resources.files("policies").joinpath("policy.csv").read_text(encoding="utf-8"))


class Authorizer:
    def __init__(
        self, store: PolicyStore, *, config: AccessConfig | None = None, redis: Any | None = None
    ) -> None:
        self.store = store
        self.config = config or AccessConfig()
        self._table = DecisionTable(store.load(), self.config.decision_cache_size)
        self._valid_roles: dict[str, bool] = {}
        self._watcher = PolicyWatcher(
            self.refresh, interval_s=self.config.poll_interval_s, redis=redis, channel=self.config.channel
        )

    @classmethod
    def open(cls, config: AccessConfig, data_dir: str | Path, redis: Any | None = None) -> Authorizer:
        """The authorizer over ``<data_dir>/<config.policy_db>``, seeded on first start."""
        data = Path(data_dir).expanduser()
        db = Path(config.policy_db).expanduser()
        db = db if db.is_absolute() else data / db
        if config.seed_policy is None:
            seed = default_policy()
        else:
            seed_path = Path(config.seed_policy).expanduser()
            seed_path = seed_path if seed_path.is_absolute() else data / seed_path
            seed = Policy.from_csv(seed_path.read_text(encoding="utf-8"))
        return cls(PolicyStore(db, seed), config=config, redis=redis)

    @property
    def policy(self) -> Policy:
        return self._table.policy

    @property
    def version(self) -> int:
        return self._table.version

    def members_of(self, principal: Principal) -> tuple[str, ...]:
        """Who the caller acts as: its user, then each valid role of its token."""
        members = [user_member(principal.subject)]
        for role in principal.roles:
            valid = self._valid_roles.get(role)
            if valid is None:
                valid = self._valid_roles[role] = is_role_name(role)
            if valid and role not in members:
                members.append(role)
        return tuple(members)

    @staticmethod
    def domain_of(principal: Principal) -> str:
        return principal.tenant or ALL_DOMAINS

    def allowed(self, principal: Principal, action: str, resource: str) -> bool:
        return self._table.allows(self.members_of(principal), self.domain_of(principal), action, resource)

    def control_scope(self, principal: Principal, *actions: str) -> ControlScope:
        """Where ``principal`` holds every one of the control-plane ``actions`` (see ControlScope)."""
        held = all(self.allowed(principal, action, CONTROL_RESOURCE) for action in actions)
        return ControlScope(self.domain_of(principal) if held and actions else None)

    def allowed_models(self, principal: Principal, action: str, models: Iterable[str]) -> list[str]:
        table, members, domain = self._table, self.members_of(principal), self.domain_of(principal)
        return [m for m in models if table.allows(members, domain, action, m)]

    def effective_roles(self, members: Sequence[str], domain: str = ALL_DOMAINS) -> list[str]:
        """Every role ``members`` hold in ``domain`` (the members themselves excluded)."""
        return sorted(self._table.roles_of(members, domain) - set(members))

    def effective_grants(self, members: Sequence[str], domain: str = ALL_DOMAINS) -> list[Grant]:
        return self._table.grants_of(members, domain)

    def refresh(self) -> bool:
        """Reload when the store holds a different version; True when it did."""
        if self.store.version() == self._table.version:
            return False
        self._install(self.store.load())
        return True

    def _install(self, policy: Policy) -> None:
        if policy.version > self._table.version:
            self._table = DecisionTable(policy, self.config.decision_cache_size)

    async def change(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        """Apply ``changes`` atomically and audited (see PolicyStore.apply), take them into use on
        this replica at once and announce the new version to the others."""
        updated = await self.store.apply(changes, actor, audit)
        self._install(updated)
        await self._watcher.announce(updated.version)
        return updated

    async def start(self) -> None:
        """Begin following changes made by other replicas or the CLI."""
        await self._watcher.start()

    async def stop(self) -> None:
        await self._watcher.stop()
