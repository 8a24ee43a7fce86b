"""Settings: embedded defaults, overridden by a TOML file, overridden by environment variables.

    defaults (each package's config struct)  <  --config FILE (TOML)  <  STRONGROOM_* env vars

Environment variables: ``STRONGROOM_DATA_DIR``, ``STRONGROOM_REDIS_URL`` for the top-level keys,
``STRONGROOM_<SECTION>__<KEY>`` for a key of a section (``STRONGROOM_SERVER__PORT=9000``). A value
is read as a TOML value when it parses as one (numbers, booleans, arrays, inline tables) and as
a plain string otherwise. Unknown keys are errors, so a typo never silently falls back.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from audit.config import AuditConfig
from engine.config import EngineConfig
from filters.config import FilterConfig
from gateway.auth.config import AuthConfig
from gateway.config import ServerConfig
from gateway.console.config import ConsoleConfig
from gateway.errors import ConfigError
from gateway.grpc_api.config import GrpcConfig
from gateway.quota.config import QuotaConfig
from gateway.telemetry_config import TelemetryConfig
from keys.config import KeysConfig
from policies.config import AccessConfig
from strongroom.engine_listener_config import EngineListenerConfig

__all__ = ["CONFIG_ENV", "Settings", "load_settings"]

CONFIG_ENV = "STRONGROOM_CONFIG"
_PREFIX = "STRONGROOM_"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything ``strongroom`` reads at start-up."""

    data_dir: str = "data"
    """Where models, keys, the audit log and policies live; relative to the working directory."""
    redis_url: str | None = None
    """Redis for quotas, revocations and policy sync across replicas (redis://host:6379/0).
    None: everything stays in-process or in SQLite under data_dir (one gateway only)."""
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    """The gateway's listener and engine pool."""
    grpc: GrpcConfig = msgspec.field(default_factory=GrpcConfig)
    """The gRPC API beside the HTTP one (its own port, the same pipeline)."""
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    """The local engine instance that ``serve`` supervises."""
    engine_listener: EngineListenerConfig = msgspec.field(default_factory=EngineListenerConfig)
    """Where a standalone engine (``strongroom engine``) listens, and its mutual TLS."""
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    """Trusted token issuers."""
    access: AccessConfig = msgspec.field(default_factory=AccessConfig)
    """Role-based access to models and to the control plane."""
    quota: QuotaConfig = msgspec.field(default_factory=QuotaConfig)
    """Request and token limits."""
    filters: FilterConfig = msgspec.field(default_factory=FilterConfig)
    """Content filtering of requests and responses."""
    keys: KeysConfig = msgspec.field(default_factory=KeysConfig)
    """Model encryption keys and their provider."""
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)
    """The tamper-evident audit log."""
    telemetry: TelemetryConfig = msgspec.field(default_factory=TelemetryConfig)
    """Traces and metrics."""
    console: ConsoleConfig = msgspec.field(default_factory=ConsoleConfig)
    """The web console for compliance officers and administrators under /console."""

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    def resolve(self, path: str) -> Path:
        """A configured path: absolute as given, else under the data directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.data_path / p


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    sections = set(_section_fields())
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(_PREFIX) or name == CONFIG_ENV:
            continue
        key = name[len(_PREFIX) :].lower()
        if "__" in key:
            section, _, field = key.partition("__")
            if section not in sections:
                raise ConfigError(f"{name}: unknown settings section {section!r}")
            out.setdefault(section, {})[field] = _parse_env_value(raw)
        elif key in ("data_dir", "redis_url"):
            out[key] = raw
    return out


def _section_fields() -> dict[str, Any]:
    return {f: None for f in Settings.__struct_fields__ if f not in ("data_dir", "redis_url")}


def _check_unknown(raw: Any, info: msgspec.inspect.Type, where: str) -> None:
    """Reject keys no struct declares, at any depth, so a typo never falls back to a default."""
    if isinstance(info, msgspec.inspect.StructType) and isinstance(raw, Mapping):
        fields = {f.encode_name: f for f in info.fields}
        for key, value in raw.items():
            if key not in fields:
                known = ", ".join(sorted(fields))
                raise ConfigError(f"unknown setting {where}{key!r} (known here: {known})")
            _check_unknown(value, fields[key].type, f"{where}{key}.")
    elif isinstance(info, msgspec.inspect.UnionType):
        for t in info.types:
            _check_unknown(raw, t, where)
    elif isinstance(info, msgspec.inspect.VarTupleType | msgspec.inspect.ListType) and isinstance(raw, list):
        for i, item in enumerate(raw):
            _check_unknown(item, info.item_type, f"{where}{i}.")


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build the settings; ``path`` defaults to ``$STRONGROOM_CONFIG`` and may be absent."""
    env = os.environ if environ is None else environ
    path = path or env.get(CONFIG_ENV) or None
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    raw = _merge(raw, _env_overrides(env))
    _check_unknown(raw, msgspec.inspect.type_info(Settings), "")
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from None
    except (ValueError, TypeError) as exc:
        # Per-section __post_init__ checks raise their own errors with the key in the message.
        raise ConfigError(f"invalid settings: {exc}") from None
