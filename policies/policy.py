"""The policy as a value: grants (casbin ``p`` lines) and assignments (``g`` lines), validated.

    p, <role>,   <domain>, <model pattern>, <action>     role may use models matching the pattern
    g, <member>, <role>,   <domain>                      member (user:<sub> or a role) holds role

A domain is a tenant or business unit, or ``*`` for every domain. Users are written
``user:<sub>``; role names cannot contain ``:``, so no token subject can ever be mistaken for a
role (a user whose ``sub`` is "admin" is ``user:admin``, not the admin role).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from policies.errors import InvalidPolicyError

__all__ = [
    "ALL_DOMAINS",
    "CONTROL_ACTIONS",
    "CONTROL_RESOURCE",
    "INFERENCE_ACTIONS",
    "USER_PREFIX",
    "Assignment",
    "Grant",
    "Policy",
    "is_role_name",
    "user_member",
]

INFERENCE_ACTIONS = frozenset({"chat", "completion", "embedding"})
CONTROL_ACTIONS = frozenset({"admin:policy", "admin:keys", "audit:read", "audit:content"})
CONTROL_RESOURCE = "*"
ALL_DOMAINS = "*"
USER_PREFIX = "user:"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_PATTERN = re.compile(r"[A-Za-z0-9._:/@+*\-]{1,256}")
_SUBJECT = re.compile(r"[^\s,\"']{1,256}")


def is_role_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def user_member(subject: str) -> str:
    """The casbin subject of a token's ``sub``."""
    return USER_PREFIX + subject


def _check_name(kind: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise InvalidPolicyError(
            f"{kind} {value!r} is invalid: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            param=kind,
        )


def _check_domain(value: str) -> None:
    if value != ALL_DOMAINS:
        _check_name("domain", value)


class Grant(msgspec.Struct, frozen=True, kw_only=True, order=True):
    """Members of ``role`` may perform ``action`` on models matching ``pattern`` in ``domain``."""

    role: str
    pattern: str
    action: str
    domain: str = ALL_DOMAINS

    def __post_init__(self) -> None:
        _check_name("role", self.role)
        _check_domain(self.domain)
        if self.action not in INFERENCE_ACTIONS | CONTROL_ACTIONS:
            known = ", ".join(sorted(INFERENCE_ACTIONS | CONTROL_ACTIONS))
            raise InvalidPolicyError(f"action {self.action!r} is unknown (known: {known})", param="action")
        if self.action in CONTROL_ACTIONS and self.pattern != CONTROL_RESOURCE:
            raise InvalidPolicyError(
                f"control-plane action {self.action!r} applies to the whole control plane: pattern must be '*'",
                param="pattern",
            )
        if not _PATTERN.fullmatch(self.pattern):
            raise InvalidPolicyError(
                f"model pattern {self.pattern!r} is invalid: 1-256 of letters, digits, '._:/@+-' and '*' "
                "(the only wildcard, matching any run of characters)",
                param="pattern",
            )

    def as_line(self) -> tuple[str, str, str, str, str]:
        return ("p", self.role, self.domain, self.pattern, self.action)


class Assignment(msgspec.Struct, frozen=True, kw_only=True, order=True):
    """``member`` (``user:<sub>`` or a role name) holds ``role`` in ``domain``."""

    member: str
    role: str
    domain: str = ALL_DOMAINS

    def __post_init__(self) -> None:
        _check_name("role", self.role)
        _check_domain(self.domain)
        if self.member.startswith(USER_PREFIX):
            if not _SUBJECT.fullmatch(self.member[len(USER_PREFIX) :]):
                raise InvalidPolicyError(
                    f"user {self.member!r} is invalid: the subject must be 1-256 characters without "
                    "whitespace, commas or quotes",
                    param="member",
                )
        else:
            _check_name("member", self.member)
        if self.member == self.role:
            raise InvalidPolicyError(f"role {self.role!r} cannot be assigned to itself", param="role")

    def as_line(self) -> tuple[str, str, str, str]:
        return ("g", self.member, self.role, self.domain)


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    """One consistent state of the whole policy, at one version."""

    version: int = 0
    grants: frozenset[Grant] = frozenset()
    assignments: frozenset[Assignment] = frozenset()

    @classmethod
    def from_lines(cls, lines: Iterable[Iterable[str]], version: int = 0) -> Policy:
        grants: set[Grant] = set()
        assignments: set[Assignment] = set()
        for number, raw in enumerate(lines, start=1):
            fields = [f.strip() for f in raw]
            if not fields or fields == [""] or fields[0].startswith("#"):
                continue
            if fields[0] == "p" and len(fields) == 5:
                grants.add(Grant(role=fields[1], domain=fields[2], pattern=fields[3], action=fields[4]))
            elif fields[0] == "g" and len(fields) == 4:
                assignments.add(Assignment(member=fields[1], role=fields[2], domain=fields[3]))
            else:
                raise InvalidPolicyError(
                    f"policy line {number}: expected 'p, role, domain, pattern, action' or "
                    f"'g, member, role, domain', got {', '.join(fields)!r}"
                )
        return cls(version=version, grants=frozenset(grants), assignments=frozenset(assignments))

    @classmethod
    def from_csv(cls, text: str, version: int = 0) -> Policy:
        return cls.from_lines((line.split(",") for line in text.splitlines()), version=version)

    def lines(self) -> list[tuple[str, ...]]:
        return [g.as_line() for g in sorted(self.grants)] + [a.as_line() for a in sorted(self.assignments)]

    def to_csv(self) -> str:
        return "".join(", ".join(line) + "\n" for line in self.lines())

    def to_dict(self) -> dict[str, Any]:
        """Plain data in a stable order: what the admin API returns and what audit records hold."""
        return {
            "version": self.version,
            "grants": [msgspec.to_builtins(g) for g in sorted(self.grants)],
            "assignments": [msgspec.to_builtins(a) for a in sorted(self.assignments)],
        }
