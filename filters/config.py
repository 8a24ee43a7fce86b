"""Configuration of the content filter: the ``[filters]`` section of the settings file."""

from __future__ import annotations

import msgspec

DEFAULT_MAX_SCAN_CHARS = 2_097_152


class FilterConfig(msgspec.Struct, frozen=True, kw_only=True):
    policy_file: str | None = None
    """Filter policy TOML. None means the packaged ``policies/filters/default.toml``; a relative
    path is relative to ``data_dir``. Edits are picked up without a restart (mtime check)."""

    keyword_files: tuple[str, ...] = ()
    """Extra keyword lists (one term per line, ``#`` comments) on top of those the policy names.
    Relative paths are relative to ``data_dir``."""

    max_scan_chars: int = DEFAULT_MAX_SCAN_CHARS
    """Most characters the filter reads for one request (all its texts) or one response, counting
    what normalization adds. More is refused unscanned: a request with 413 ``content_too_large``,
    a response by ``on_error`` (fail closed). Scanning is linear in characters, so this bounds the
    filter's work on any machine; the default covers a body at ``server.max_body_bytes``."""

    reload_interval_s: float = 2.0
    """How often, at most, the policy file's mtime is checked for edits."""

    def __post_init__(self) -> None:
        if self.max_scan_chars < 1:
            raise ValueError("filters.max_scan_chars must be positive")
        if self.reload_interval_s < 0:
            raise ValueError("filters.reload_interval_s must not be negative")
