"""The ``[access]`` section: where the policy lives and how replicas stay in step."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["AccessConfig"]


class AccessConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Role-based access to models and to the control plane."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    """``sqlite`` (the ``policy_db`` file: replicas on one host) or ``postgres`` (one policy for
    replicas on any host; set it whenever gateways share a PostgreSQL audit log)."""
    postgres_dsn: str | None = None
    """libpq connection string of a role that may read and write the policy tables. A secret: no
    default, redacted in repr."""
    postgres_schema: str = "policy"
    """Schema holding the policy tables (created and seeded on first start)."""
    policy_db: str = "policies/policy.db"
    """SQLite file holding the live policy and its version; relative to the data directory.
    Replicas on one host share it; created and seeded on first start."""
    seed_policy: str | None = None
    """CSV (casbin ``p``/``g`` lines) to seed an empty policy database with. None: the packaged
    default (``policies/policy.csv``)."""
    poll_interval_s: float = 0.5
    """How often each replica compares its policy version with the store's, so a missed
    change notification is caught up within this interval."""
    lease_s: float | None = None
    """How long a replica decides on its policy version after a store read last confirmed it
    (see ``policies.policy_freshness``); a change waits this long after its commit before its
    call returns, so replicas on other hosts that share the store enforce it by then, and a
    replica cut off from the store refuses requests (503) once its lease runs out. None: twice
    ``poll_interval_s`` with ``backend = 'postgres'``, 0 (off) with ``sqlite``, whose replicas
    share one host and its version board. Must exceed ``poll_interval_s``, or replicas would
    reload before every request between polls."""
    sync_timeout_s: float = 2.0
    """Longest a request waits for its replica to load a newer policy version (or confirm its
    own) before it is refused with 503 ``policy_unavailable``."""
    channel: str = "strongroom:policy:version"
    """Redis pub/sub channel on which a new policy version is announced (when Redis is configured)."""
    decision_cache_size: int = 100_000
    """Most memoised (caller, action, model) decisions kept per policy version."""

    def __post_init__(self) -> None:
        if not 0.05 <= self.poll_interval_s <= 1.0:
            # Above 1 s a missed notification would break the "every replica within 1 s" promise.
            raise ValueError(f"access.poll_interval_s must be in 0.05..1.0, not {self.poll_interval_s}")
        if self.lease_s is not None and self.lease_s != 0 and not self.lease_s > self.poll_interval_s:
            raise ValueError(
                f"access.lease_s must be 0 (off) or more than access.poll_interval_s "
                f"({self.poll_interval_s}), not {self.lease_s}"
            )
        if not 0 < self.sync_timeout_s <= 60:
            raise ValueError(f"access.sync_timeout_s must be in (0, 60], not {self.sync_timeout_s}")
        if self.backend == "postgres" and not self.postgres_dsn:
            raise ValueError("access.backend = 'postgres' needs access.postgres_dsn")
        if not self.postgres_schema.isidentifier():
            raise ValueError("access.postgres_schema must be a plain identifier")
        if not self.policy_db:
            raise ValueError("access.policy_db must not be empty")
        if not self.channel:
            raise ValueError("access.channel must not be empty")
        if self.decision_cache_size < 0:
            raise ValueError("access.decision_cache_size must be >= 0")

    @property
    def effective_lease_s(self) -> float:
        """``lease_s`` with None resolved by the backend."""
        if self.lease_s is not None:
            return self.lease_s
        return 2 * self.poll_interval_s if self.backend == "postgres" else 0.0

    def __repr__(self) -> str:
        dsn = "<redacted>" if self.postgres_dsn else None
        return f"AccessConfig(backend={self.backend!r}, policy_db={self.policy_db!r}, postgres_dsn={dsn})"
