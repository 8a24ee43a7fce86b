"""The one authorization function for inference, /v1/models, and the admin and audit APIs.

Deny by default: a caller may do only what a grant to one of its roles allows. A caller acts as
its user (``user:<sub>``, which may hold roles assigned in the policy) and as each role in its
token; its domain is its tenant, or ``*`` (global grants only) when it has none. Token roles that
are not valid role names are ignored, so a token cannot smuggle in ``user:someone-else``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from common.audit_event import AuditEvent, Decision, EventType
from common.audit_sink import AuditSink
from common.principal import Principal
from policies.config import AccessConfig
from policies.control_scope import ControlScope
from policies.decision_table import DecisionTable
from policies.errors import PolicyTamperedError, PolicyUnavailableError
from policies.policy import (
    ALL_DOMAINS,
    CONTROL_ACTIONS,
    CONTROL_RESOURCE,
    Grant,
    Policy,
    is_role_name,
    user_member,
)
from policies.policy_backend import PolicyBackend, board_path, open_policy_store
from policies.policy_change import PolicyChange
from policies.policy_freshness import PolicyFreshness
from policies.policy_seal import PolicySeal, tamper_event
from policies.policy_watcher import PolicyWatcher
from policies.version_board import VersionBoard

__all__ = ["Authorizer", "default_policy"]

log = logging.getLogger("strongroom.policies")


def default_policy() -> Policy:
    """The packaged ``policies/policy.csv``."""
    return Policy.from_csv(resources.files("policies").joinpath("policy.csv").read_text(encoding="utf-8"))


class Authorizer:
    def __init__(
        self,
        store: PolicyBackend,
        *,
        config: AccessConfig | None = None,
        redis: Any | None = None,
        audit: AuditSink | None = None,
        board: VersionBoard | None = None,
    ) -> None:
        """``audit`` receives what the authorizer finds on its own (a tampered store); changes are
        audited through the sink given to ``change``. ``board``: this host's version board (None:
        changes made by other processes count only once a reload finds them). Raises
        PolicyTamperedError when the store fails its seal: with no verified policy to keep, the
        replica must not start."""
        self.store = store
        self.config = config or AccessConfig()
        self._freshness = PolicyFreshness(board, lease_s=self.config.effective_lease_s)
        self._audit = audit
        self._reported: set[str] = set()
        self._reporting: set[asyncio.Task[int]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refresh_lock = threading.Lock()  # the watcher reloads on a worker thread
        self._install_lock = threading.Lock()
        started, seen = self._freshness.now(), board.version() if board is not None else 0
        self._table = DecisionTable(store.load(), self.config.decision_cache_size)
        if board is not None and seen > self.version:
            log.warning(
                "policy store holds version %d, below the %d this host saw (restored?): %d is in force",
                self.version,
                seen,
                self.version,
            )
            board.settle(seen, self.version)
        self._freshness.confirm(started)
        self._valid_roles: dict[str, bool] = {}
        self._watcher = PolicyWatcher(
            self.refresh,
            interval_s=self.config.poll_interval_s,
            redis=redis,
            channel=self.config.channel,
            store_changes=store.changes,
        )

    @classmethod
    def open(
        cls,
        config: AccessConfig,
        data_dir: str | Path,
        redis: Any | None = None,
        *,
        seal: PolicySeal | None = None,
        audit: AuditSink | None = None,
    ) -> Authorizer:
        """The authorizer over the configured store (``<data_dir>/<config.policy_db>`` or
        PostgreSQL), seeded on first start; with ``seal`` the store is tamper-evident."""
        data = Path(data_dir).expanduser()
        if config.seed_policy is None:
            seed = default_policy()
        else:
            seed_path = Path(config.seed_policy).expanduser()
            seed_path = seed_path if seed_path.is_absolute() else data / seed_path
            seed = Policy.from_csv(seed_path.read_text(encoding="utf-8"))
        store = open_policy_store(config, data, seed, seal)
        board = VersionBoard(board_path(config, data))
        return cls(store, config=config, redis=redis, audit=audit, board=board)

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

    def _current_table(self) -> DecisionTable:
        """The table, if it may decide now; PolicyUnavailableError (503) when a newer version
        was committed on this host or its lease ran out (a request awaits ``current`` first)."""
        table = self._table
        if not self._freshness.is_current(table.version):
            raise PolicyUnavailableError(self._freshness.why_not_current(table.version))
        return table

    async def current(self) -> None:
        """Make sure the next decisions are on the newest committed version: reload first when
        this replica is behind (or its lease ran out), waiting at most ``sync_timeout_s``.
        Raises PolicyUnavailableError (503) when it cannot: never a decision on a stale table."""
        if self._freshness.is_current(self._table.version):
            return
        try:
            await asyncio.wait_for(self._catch_up(), self.config.sync_timeout_s)
        except TimeoutError:
            raise PolicyUnavailableError(
                f"policy store did not answer within {self.config.sync_timeout_s} s; "
                f"version {self.version} cannot be confirmed current"
            ) from None
        self._current_table()

    async def _catch_up(self) -> None:
        await self._watcher.reloaded()  # the reload under way (the announcement's) may be enough
        if not self._freshness.is_current(self._table.version):
            await self._watcher.refresh_now()  # one that began after this replica found itself behind

    def allowed(self, principal: Principal, action: str, resource: str) -> bool:
        table = self._current_table()
        return table.allows(self.members_of(principal), self.domain_of(principal), action, resource)

    def holds(self, principal: Principal, action: str) -> bool:
        """Whether ``principal`` holds the control-plane ``action`` (in its own domain)."""
        return self.allowed(principal, action, CONTROL_RESOURCE)

    def control_scope(self, principal: Principal, *actions: str) -> ControlScope:
        """Where ``principal`` holds every one of the control-plane ``actions`` (see ControlScope)."""
        held = all(self.holds(principal, action) for action in actions)
        return ControlScope(self.domain_of(principal) if held and actions else None)

    def change_refusal(self, principal: Principal, change: PolicyChange) -> str | None:
        """Why ``principal`` may not make ``change`` (None: it may). The one rule for every way a
        policy is changed (the admin API, the console):

        - it administers somewhere (``admin:policy``, see ``control_scope``), and the rule's domain
          is within that reach;
        - no escalation: an addition hands out only control-plane rights the caller holds itself
          (granting ``audit:content``, or assigning a role such as ``admin`` or ``compliance``,
          needs every control right it carries); model grants are what administrators give out.
        """
        scope = self.control_scope(principal, "admin:policy")
        if scope.is_empty:
            return "admin:policy required"
        if not scope.covers(change.rule.domain):
            return f"admin:policy not held in domain {change.rule.domain!r}"
        if not change.adds:
            return None
        rule = change.rule
        grants = [rule] if isinstance(rule, Grant) else self.effective_grants([rule.role], rule.domain)
        missing = sorted(
            {g.action for g in grants if g.action in CONTROL_ACTIONS}
            - {a for a in CONTROL_ACTIONS if self.holds(principal, a)}
        )
        return f"would hand out permissions not held: {', '.join(missing)}" if missing else None

    def allowed_models(self, principal: Principal, action: str, models: Iterable[str]) -> list[str]:
        table, members, domain = self._current_table(), self.members_of(principal), self.domain_of(principal)
        return [m for m in models if table.allows(members, domain, action, m)]

    def effective_roles(self, members: Sequence[str], domain: str = ALL_DOMAINS) -> list[str]:
        """Every role ``members`` hold in ``domain`` (the members themselves excluded)."""
        return sorted(self._table.roles_of(members, domain) - set(members))

    def effective_grants(self, members: Sequence[str], domain: str = ALL_DOMAINS) -> list[Grant]:
        return self._table.grants_of(members, domain)

    def refresh(self) -> bool:
        """Reload when the store holds a different version; True when it did.

        A store that fails its seal, or went back to an older version, is not taken into use:
        the last verified policy stays in force, and the finding goes to the audit log once."""
        with self._refresh_lock:
            in_force = self._table.version
            started = self._freshness.now()
            if self.store.version() == in_force:
                self._freshness.confirm(started)
                return False
            try:
                policy = self.store.load()
                if policy.version < in_force:
                    raise PolicyTamperedError(
                        f"policy store went back from version {in_force} to {policy.version} (rolled back)"
                    )
            except PolicyTamperedError as exc:
                self._report(tamper_event(exc, action=f"version {in_force} stays in force"))
                # Read, and no change can be made through the API on it (``check_before_change``):
                # the verified version stays current.
                self._freshness.confirm(started)
                raise
            self._install(policy)
            self._freshness.confirm(started)
            return True

    def _report(self, event: AuditEvent) -> None:
        """Audit a finding once per distinct detail (the watcher meets it again at every poll).
        Called on the watcher's worker thread, or on the loop itself."""
        if self._audit is None or event.detail in self._reported:
            return
        self._reported.add(event.detail)
        loop = self._loop or asyncio.get_running_loop()
        loop.call_soon_threadsafe(self._start_report, event)

    def _start_report(self, event: AuditEvent) -> None:
        assert self._audit is not None
        task = asyncio.get_running_loop().create_task(self._audit.append(event))
        self._reporting.add(task)
        task.add_done_callback(self._reported_done)

    def _reported_done(self, task: asyncio.Task[int]) -> None:
        self._reporting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("policy tamper finding not audited: %s", type(task.exception()).__name__)

    def _install(self, policy: Policy) -> None:
        if policy.version <= self._table.version:
            return
        table = DecisionTable(policy, self.config.decision_cache_size)  # casbin: see enforcer._PARSE_LOCK
        with self._install_lock:  # a reload (worker thread) and a change (loop) may race: newest wins
            if policy.version > self._table.version:
                self._table = table

    async def change(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        """Apply ``changes`` atomically and audited (see PolicyStore.apply); returns once they
        are in force on every replica: this one (installed), the others on this host (the
        version board) and those on other hosts (their leases waited out)."""
        updated = await self.store.apply(changes, actor, audit)
        committed_s = self._freshness.now()
        # Shielded: a caller that goes away now still leaves the version installed and published.
        await asyncio.shield(self._take_into_use(updated))
        await self._freshness.wait_out_leases(committed_s)
        return updated

    async def _take_into_use(self, updated: Policy) -> None:
        # Compiled off the loop: casbin and the table's check take a noticeable time on big policies.
        # Installed before it is published, so this replica's own requests do not reload it too.
        await asyncio.to_thread(self._install, updated)
        self._freshness.publish(updated.version)
        await self._watcher.announce(updated.version)  # the others reload now, not at a request

    async def record_opening(self, audit: AuditSink, actor: str = "") -> None:
        """Record what opening the store did to it (the seed policy imported into a new store),
        once, by whoever opened it: the gateway at start, or a CLI command with its operator."""
        if not self.store.opening_note:
            return
        await audit.append(
            AuditEvent(
                event_type=EventType.ADMIN_CHANGE,
                decision=Decision.ALLOW,
                subject=actor,
                endpoint="policy",
                detail=f"policy import: {self.store.opening_note}; version {self.version}",
            )
        )
        self.store.opening_note = ""

    async def start(self) -> None:
        """Begin following changes made by other replicas or the CLI."""
        self._loop = asyncio.get_running_loop()
        if self._audit is not None:
            await self.record_opening(self._audit)
        await self._watcher.start()

    async def stop(self) -> None:
        await self._watcher.stop()
        await asyncio.sleep(0)  # let reports scheduled from the watcher's thread begin
        if self._reporting:
            await asyncio.gather(*self._reporting, return_exceptions=True)
        self.store.close()
