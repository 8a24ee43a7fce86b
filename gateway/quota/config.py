"""The ``[quota]`` section: request, token and concurrency limits per subject and per role."""

from __future__ import annotations

import msgspec

from gateway.errors import ConfigError

__all__ = ["QuotaConfig", "QuotaLimits"]


class QuotaLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One set of limits. A field left as None takes its value from the next, less specific level."""

    requests_per_minute: int | None = None
    """Requests a subject may start per one-minute window."""
    tokens_per_minute: int | None = None
    """Prompt plus completion tokens per one-minute window (reserved up front, settled on usage)."""
    concurrent_requests: int | None = None
    """Requests a subject may have in flight at once."""
    max_tokens_ceiling: int | None = None
    """Largest ``max_tokens`` a request may ask for; above it the request is refused, not clamped."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"quota: {name} must be >= 1 (or left unset), not {value}")


_GENEROUS = QuotaLimits(
    requests_per_minute=600, tokens_per_minute=1_000_000, concurrent_requests=32, max_tokens_ceiling=32_768
)


class QuotaConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits resolve per field: the subject's own entry, else the most generous of the caller's
    roles that sets it, else ``default``. Counters are kept per subject (issuer + sub)."""

    default: QuotaLimits = _GENEROUS
    """Limits for everyone without a more specific entry; generous, but always present."""
    roles: dict[str, QuotaLimits] = msgspec.field(default_factory=dict)
    """Limits by role name (e.g. ``[quota.roles.analyst] requests_per_minute = 60``)."""
    subjects: dict[str, QuotaLimits] = msgspec.field(default_factory=dict)
    """Limits by token subject (``sub``), overriding the role limits field by field."""
    window_s: float = 60.0
    """Length of the fixed rate window. The per-minute limits apply per window of this length."""
    lease_ttl_s: float = 30.0
    """A concurrency slot is renewed every third of this while its request runs; one whose holder
    vanished (crashed replica) frees itself after at most this long."""
    fail_open: bool = False
    """Admit requests when Redis is unreachable. Off: such requests get 503 (fail closed)."""
    key_prefix: str = "strongroom:quota"
    """Prefix of every Redis key the limiter writes."""
    overrides_refresh_s: float = 1.0
    """How often (at most) a replica looks for quota overrides another replica or the console
    changed (one Redis ``GET`` of a version counter; the overrides are re-read only when it moved)."""

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise ConfigError(f"quota.window_s must be > 0, not {self.window_s}")
        if self.lease_ttl_s <= 0:
            raise ConfigError(f"quota.lease_ttl_s must be > 0, not {self.lease_ttl_s}")
        if self.overrides_refresh_s <= 0:
            raise ConfigError(f"quota.overrides_refresh_s must be > 0, not {self.overrides_refresh_s}")
        if not self.key_prefix:
            raise ConfigError("quota.key_prefix must not be empty")
        for field in QuotaLimits.__struct_fields__:
            if getattr(self.default, field) is None:
                raise ConfigError(f"quota.default.{field} must be set: the default is the last fallback")
