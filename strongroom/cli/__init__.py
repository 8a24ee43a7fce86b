"""The ``strongroom`` command. Every command group lives here, one module each, beside the root:

    root.py      strongroom serve | engine | config show|check|example (and mounts the rest)
    token.py     strongroom token, strongroom admin revoke      (gateway.auth's stores)
    admin.py     strongroom admin grant|ungrant|assign|...      (policies)
    audit.py     strongroom audit tail|search|verify|export|... (audit)
    filters.py   strongroom filters scan                        (filters)
    keys.py      strongroom keys ..., strongroom models ...     (keys)

A command reads the settings (``strongroom.config``) and drives a library package; the library
packages never import ``strongroom`` (an import-linter contract in pyproject.toml holds it).
"""

from strongroom.cli.root import main

__all__ = ["main"]
