"""Configuration of the content filter: the ``[filters]`` section of the settings file."""

from __future__ import annotations

import msgspec


class FilterConfig(msgspec.Struct, frozen=True, kw_only=True):
    policy_file: str | None = None
    """Filter policy TOML. None means the packaged ``policies/filters/default.toml``; a relative
    path is relative to ``data_dir``. Edits are picked up without a restart (mtime check)."""

    keyword_files: tuple[str, ...] = ()
    """Extra keyword lists (one term per line, ``#`` comments) on top of those the policy names.
    Relative paths are relative to ``data_dir``."""

    scan_timeout_ms: float = 50.0
    """Time budget for all detectors on one text. A detector that runs past it fails closed."""

    reload_interval_s: float = 2.0
    """How often, at most, the policy file's mtime is checked for edits."""

    def __post_init__(self) -> None:
        if self.scan_timeout_ms <= 0:
            raise ValueError("filters.scan_timeout_ms must be positive")
        if self.reload_interval_s < 0:
            raise ValueError("filters.reload_interval_s must not be negative")
