"""Who may share a model's prefix cache: the salt that starts every block-hash chain.

A prefix-cache hit answers faster, so whoever shares a cache can tell by timing whether
another sharer already sent a prompt (Bob resending Alice's prompt answered several times
faster; bench/BENCHMARKS.md). The salt therefore names the widest group allowed to share, per model:

    subject (default)  one (tenant, subject): nobody learns anything about anyone else
    tenant             everyone of one tenant; a token without a tenant still gets its own
    global             everyone: the most reuse, for models whose prompts are not secret

Wider scopes trade that leak for cache reuse, so an admin has to choose them per model
(``[[engine.models]] prefix_cache_scope``).
"""

from __future__ import annotations

import json

__all__ = ["CACHE_SCOPES", "cache_salt"]

CACHE_SCOPES = ("subject", "tenant", "global")


def cache_salt(scope: str, tenant: str | None, subject: str | None) -> str:
    """The prefix-cache salt of a request; equal salts share cached blocks."""
    if scope == "global":
        return ""
    if scope == "tenant" and tenant:
        return json.dumps(["tenant", tenant])
    # JSON keeps ("a", "b/c") and ("a/b", "c") apart.
    return json.dumps(["subject", tenant or "", subject or ""])
