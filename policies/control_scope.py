"""Where a caller may use a control-plane permission: every domain, its own tenant, or nowhere.

A caller acts in one domain, as for inference: its token's tenant, or ``*`` when the token has
none. A control-plane permission (``admin:*``, ``audit:*``) reaches exactly as far as that:

    token tenant   holds the permission there   may read / change
    -------------  ---------------------------  ------------------------------------------
    none (``*``)   yes (grant and links in *)   every domain, ``*`` included
    ``retail``     yes (grant in * or retail)   rules and records of ``retail`` only
    any            no                           nothing (403)

So a tenant's administrator cannot write a rule for ``*`` or another tenant, cannot read another
tenant's audit records, and a token scoped to a tenant never acts globally, even for a caller who
holds the permission in ``*``: "``*`` only for holders in ``*``", and only with a token for ``*``.
"""

from __future__ import annotations

import msgspec

from policies.policy import ALL_DOMAINS, Policy

__all__ = ["ControlScope"]


class ControlScope(msgspec.Struct, frozen=True):
    """The domain a caller's control-plane permission covers; None when it holds it nowhere."""

    domain: str | None

    @property
    def is_empty(self) -> bool:
        return self.domain is None

    @property
    def is_global(self) -> bool:
        return self.domain == ALL_DOMAINS

    def covers(self, domain: str) -> bool:
        """Whether rules or records of ``domain`` (``*`` meaning all of them) are within reach."""
        return self.is_global or (self.domain is not None and domain == self.domain)

    def visible(self, policy: Policy) -> Policy:
        """The part of ``policy`` this scope may read: all of it, or the rules of its one domain."""
        if self.is_global:
            return policy
        return Policy(
            version=policy.version,
            grants=frozenset(g for g in policy.grants if g.domain == self.domain),
            assignments=frozenset(a for a in policy.assignments if a.domain == self.domain),
        )
