"""What ``config show`` prints instead of a secret: the settings that may carry one, masked.

Secrets are meant to come from the environment (``STRONGROOM_AUDIT__POSTGRES_DSN``), and the
effective settings merge the environment in, so every value that can hold a password is masked
here, in one place: DSN and URL passwords, libpq ``password=`` pairs and OTLP header values.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "redact_settings"]

MASK = "***"
_SECRET_STRINGS = (
    ("redis_url",),
    ("audit", "postgres_dsn"),
    ("audit", "witness_postgres_dsn"),
)
_LIBPQ_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def _mask_dsn(value: str) -> str:
    value = _LIBPQ_PASSWORD.sub(rf"\1{MASK}", value)
    parts = urlsplit(value)
    if parts.password is None:
        return value
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def redact_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``msgspec.to_builtins(settings)`` with every secret masked."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
    for path in _SECRET_STRINGS:
        holder = out if len(path) == 1 else out.get(path[0], {})
        value = holder.get(path[-1])
        if isinstance(value, str):
            holder[path[-1]] = _mask_dsn(value)
    telemetry = out.get("telemetry", {})
    if isinstance(telemetry.get("otlp_headers"), dict):
        telemetry["otlp_headers"] = dict.fromkeys(telemetry["otlp_headers"], MASK)
    return out
