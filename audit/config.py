"""Audit configuration: where records live, how often they are sealed, and what content is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

ContentMode = Literal["none", "hmac", "encrypt"]


class ContentRule(msgspec.Struct, frozen=True, kw_only=True):
    """One content-retention rule; the first rule matching a record's roles and model wins."""

    mode: ContentMode
    """``none`` keeps nothing, ``hmac`` a keyed digest (checkable, not readable), ``encrypt`` AES-GCM."""
    roles: tuple[str, ...] = ("*",)
    """Matches when the caller holds any of these roles; ``*`` matches everyone."""
    models: tuple[str, ...] = ("*",)
    """Shell-style patterns (``fnmatchcase``) on the model name; ``*`` matches every model."""


class AuditConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The ``[audit]`` section. Relative paths are under ``settings.data_dir``."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    """``sqlite`` (embedded default, WAL, synchronous=FULL) or ``postgres`` (production)."""
    sqlite_path: str = "audit/audit.db"
    """The SQLite database file."""
    postgres_dsn: str | None = None
    """libpq connection string for the append-only audit role. A secret: no default, redacted in repr."""
    postgres_schema: str = "audit"
    """Schema holding the audit tables."""
    checkpoint_interval_s: float = 60.0
    """A signed checkpoint is written at least this often (also when idle, so truncation shows)."""
    checkpoint_every: int = 1000
    """...and after at most this many records."""
    signing_key_file: str = "keys/audit-signing-key.pem"
    """Ed25519 private key (PKCS#8 PEM) that signs checkpoints."""
    create_signing_key: bool = True
    """Dev mode: create the signing key (mode 0600) when missing. Turn off in production."""
    content_default: ContentMode = "none"
    """What to keep of prompts and completions when no rule matches."""
    content_rules: tuple[ContentRule, ...] = ()
    """Per role and model overrides, first match wins."""
    content_hmac_key_file: str = "keys/audit-content-hmac.key"
    """32 random bytes: the salt of the content HMAC (created 0600 when missing)."""
    content_key_file: str = "keys/audit-content.key"
    """32 random bytes: the AES-256-GCM audit key for encrypted content (created 0600 when missing)."""
    max_pending: int = 100_000
    """Appends waiting for the writer beyond which new ones are refused at once (503)."""
    append_timeout_s: float = 10.0
    """Longest an append waits to become durable before the request is refused (503)."""
    max_batch: int = 4096
    """Upper bound of records in one group commit."""
    archive_dir: str = "audit/archive"
    """Where sealed segment files go when older records are archived."""
    retention_online_days: int = 90
    """Records younger than this stay in the online store."""
    retention_days: int = 365
    """Minimum total retention (PCI DSS 10.5.1: 12 months); archives are never deleted before this."""
    second_sink_path: str | None = None
    """Optional JSONL file that receives outage notices while the primary store is down."""
    writer_lock_wait_s: float = 10.0
    """SQLite: how long a starting gateway waits for the log's writer lock (held by the previous
    gateway while it stops, or briefly by a CLI command) before it refuses to start."""

    def __post_init__(self) -> None:
        if self.backend == "postgres" and not self.postgres_dsn:
            raise ValueError("audit.backend = 'postgres' needs audit.postgres_dsn")
        if self.checkpoint_interval_s <= 0 or self.checkpoint_interval_s > 3600:
            raise ValueError("audit.checkpoint_interval_s must be in (0, 3600]")
        if self.checkpoint_every < 1:
            raise ValueError("audit.checkpoint_every must be >= 1")
        if self.max_pending < 1 or self.append_timeout_s <= 0:
            raise ValueError("audit.max_pending must be >= 1 and audit.append_timeout_s > 0")
        if not 0 <= self.writer_lock_wait_s <= 600:
            raise ValueError("audit.writer_lock_wait_s must be in [0, 600]")
        if self.max_batch < 1:
            raise ValueError("audit.max_batch must be >= 1")
        if self.retention_days < 365:
            raise ValueError("audit.retention_days must be >= 365 (PCI DSS v4 10.5.1)")
        if not 0 < self.retention_online_days <= self.retention_days:
            raise ValueError("audit.retention_online_days must be in (0, retention_days]")
        if not self.postgres_schema.isidentifier():
            raise ValueError("audit.postgres_schema must be a plain identifier")

    def __repr__(self) -> str:
        dsn = "<redacted>" if self.postgres_dsn else None
        return f"AuditConfig(backend={self.backend!r}, sqlite_path={self.sqlite_path!r}, postgres_dsn={dsn})"

    def resolve(self, data_dir: Path, path: str) -> Path:
        """A configured path, relative to ``data_dir`` unless absolute."""
        candidate = Path(path)
        return candidate if candidate.is_absolute() else data_dir / candidate
