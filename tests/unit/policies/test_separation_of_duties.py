"""The default policy separates administration from reading audit content."""

from __future__ import annotations

from pathlib import Path

from common.principal import Principal
from policies import AccessConfig, Authorizer
from policies.policy import CONTROL_ACTIONS


def caller(*roles: str, tenant: str | None = None) -> Principal:
    return Principal(subject="someone", roles=roles, issuer="https://idp", tenant=tenant)


def test_no_default_role_both_administers_and_reads_audit_content(tmp_path: Path) -> None:
    authorizer = Authorizer.open(AccessConfig(), tmp_path)
    for tenant in (None, "retail"):
        admin = caller("admin", tenant=tenant)
        assert authorizer.allowed(admin, "admin:policy", "*")
        assert not authorizer.allowed(admin, "audit:content", "*")
        assert authorizer.allowed(caller("compliance", tenant=tenant), "audit:content", "*")
        assert not authorizer.allowed(caller("compliance", tenant=tenant), "admin:policy", "*")
    roles = ("admin", "analyst", "auditor", "compliance")
    for role in roles:
        held = {a for a in CONTROL_ACTIONS if authorizer.allowed(caller(role), a, "*")}
        assert not ({"admin:policy", "audit:content"} <= held), role
