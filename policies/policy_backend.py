"""The policy storage seam: SQLite (``PolicyStore``) or PostgreSQL (``PostgresPolicyStore``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Protocol

from common.audit_sink import AuditSink
from policies.config import AccessConfig
from policies.policy import Policy
from policies.policy_change import PolicyChange
from policies.policy_seal import PolicySeal
from policies.policy_store import PolicyStore

__all__ = ["PolicyBackend", "board_path", "open_policy_store"]


class PolicyBackend(Protocol):
    opening_note: str
    """What opening did that the audit log should hear of (a new or a newly sealed store)."""

    def version(self) -> int:
        """The stored version (cheap: polled every ``access.poll_interval_s``)."""
        ...

    def load(self) -> Policy:
        """The whole policy at one version; PolicyTamperedError when it fails its seal."""
        ...

    async def apply(self, changes: Sequence[PolicyChange], actor: str, audit: AuditSink) -> Policy:
        """All of ``changes`` audited once through ``audit``, or nothing (see ``PolicyStore.apply``)."""
        ...

    def changes(self) -> AsyncIterator[None] | None:
        """A feed yielding once per committed change, from the store itself (PostgreSQL NOTIFY);
        None for a store that has none. Ends or raises when the connection is lost."""
        ...

    def close(self) -> None:
        """Release held connections (a later read opens them again)."""
        ...


def _sqlite_path(config: AccessConfig, data_dir: Path) -> Path:
    db = Path(config.policy_db).expanduser()
    return db if db.is_absolute() else data_dir / db


def board_path(config: AccessConfig, data_dir: Path) -> Path:
    """Where this host's ``VersionBoard`` for the configured store lives: beside the SQLite file
    (every process sharing the file shares the board), or per PostgreSQL schema in the data
    directory."""
    if config.backend == "postgres":
        return data_dir / "policies" / f"postgres-{config.postgres_schema}.version"
    db = _sqlite_path(config, data_dir)
    return db.with_name(f"{db.name}-version")


def open_policy_store(
    config: AccessConfig, data_dir: Path, seed: Policy, seal: PolicySeal | None
) -> PolicyBackend:
    if config.backend == "postgres":
        from policies.postgres_policy_store import PostgresPolicyStore

        assert config.postgres_dsn is not None  # AccessConfig guarantees it
        return PostgresPolicyStore(config.postgres_dsn, config.postgres_schema, seed, seal)
    return PolicyStore(_sqlite_path(config, data_dir), seed, seal)
