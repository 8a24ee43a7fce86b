"""Audit configuration: where records live, how often they are sealed, and what content is kept."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

ContentMode = Literal["none", "hmac", "encrypt"]

_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")


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
    signing_key_provider: Literal["file", "pkcs11"] = "file"
    """Where the checkpoint signing key lives: ``signing_key_file``, or a PKCS#11 token (HSM).
    Gateways sharing one PostgreSQL log must all use the same key (one file secret, or one token)."""
    signing_key_file: str = "keys/audit-signing-key.pem"
    """Ed25519 private key (PKCS#8 PEM) that signs checkpoints. Several gateways: an absolute path
    to one secret mounted into each, with ``create_signing_key = false``."""
    create_signing_key: bool = True
    """Dev mode: create the signing key (file mode 0600, or on the token) when missing. Turn off in
    production, where a missing key must stop start-up rather than start a second signer."""
    signing_pkcs11_module: str = "/usr/lib/softhsm/libsofthsm2.so"
    """PKCS#11 module (.so) of the HSM holding the signing key, for ``signing_key_provider = "pkcs11"``."""
    signing_pkcs11_token_label: str | None = None
    """Label of the token holding the signing key; required for ``signing_key_provider = "pkcs11"``."""
    signing_pkcs11_pin_env: str | None = None
    """Environment variable holding the token's user PIN (no default PIN); required for "pkcs11"."""
    signing_pkcs11_key_id: str = "strongroom-audit"
    """Key id of the signing key on the token (objects "<key id>/sign/v1"; not the model master key)."""
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
    witness_file: str = "witness/audit-checkpoints.jsonl"
    """Append-only file that every signed checkpoint is also written to (one signed, chained line
    each), so ``audit verify`` and start-up detect a store whose tail was cut or that was rolled
    back. Its own folder, apart from ``audit/``, so it can be another volume or owner and
    ``chattr +a`` (SQLite must create and delete files beside audit.db; this folder needs neither).
    In production give an absolute path the gateway can append to but its store's owner cannot
    rewrite. Empty disables it (not recommended: only a PostgreSQL witness can then be checked)."""
    witness_syslog: str | None = None
    """Also send each checkpoint to syslog: a socket path (``/dev/log``) or ``host:port`` (UDP).
    Publish-only: a copy for the SIEM that ``verify`` cannot read back."""
    witness_postgres_dsn: str | None = None
    """libpq connection string of a role that may only INSERT and SELECT the witness table
    (``audit/postgres_witness_role.sql``); the audit store's role cannot write it. A secret."""
    witness_postgres_schema: str = "audit_witness"
    """Schema of the PostgreSQL witness table; owned by neither the gateway's audit role nor its store."""
    public_key_file: str | None = None
    """Absolute path of the trusted checkpoint public key (PEM, from ``strongroom audit public-key``),
    kept outside ``data_dir``: ``verify`` and start-up check signatures with it, never with a key
    from the data directory they check. Unset (with no fingerprint): verify warns that it cannot
    vouch for authenticity, and exits 4 when ``create_signing_key`` is off (production)."""
    public_key_fingerprint: str | None = None
    """``sha256:<64 hex>`` of the trusted public key (``strongroom audit public-key --fingerprint``):
    pins the key wherever it lives (key file or HSM); start-up refuses a signing key that differs."""
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
        if self.signing_key_provider == "pkcs11" and not (
            self.signing_pkcs11_token_label and self.signing_pkcs11_pin_env
        ):
            raise ValueError(
                "audit.signing_key_provider = 'pkcs11' needs signing_pkcs11_token_label and signing_pkcs11_pin_env"
            )
        if not self.signing_pkcs11_key_id or "/" in self.signing_pkcs11_key_id:
            raise ValueError("audit.signing_pkcs11_key_id must be non-empty and contain no '/'")
        if not self.postgres_schema.isidentifier():
            raise ValueError("audit.postgres_schema must be a plain identifier")
        if not self.witness_postgres_schema.isidentifier():
            raise ValueError("audit.witness_postgres_schema must be a plain identifier")
        if self.public_key_file is not None and not Path(self.public_key_file).is_absolute():
            raise ValueError("audit.public_key_file must be an absolute path outside data_dir")
        if self.public_key_fingerprint is not None and not _FINGERPRINT.fullmatch(
            self.public_key_fingerprint
        ):
            raise ValueError("audit.public_key_fingerprint must be 'sha256:' and 64 lowercase hex digits")

    def __repr__(self) -> str:
        dsn = "<redacted>" if self.postgres_dsn else None
        return f"AuditConfig(backend={self.backend!r}, sqlite_path={self.sqlite_path!r}, postgres_dsn={dsn})"

    def resolve(self, data_dir: Path, path: str) -> Path:
        """A configured path, relative to ``data_dir`` unless absolute."""
        candidate = Path(path)
        return candidate if candidate.is_absolute() else data_dir / candidate
