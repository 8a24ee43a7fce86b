"""A route's permission, declared once on the route: ``guards=[requires(Permission(...))]``.

The guard (``gateway.gatekeeper.requires``) asks the app's ``Gatekeeper`` before anything of the
request is read: the caller must hold every action on the control plane, and reach the domain
the request concerns when the route names one. What a refusal answers (``refusal``) and how its audit
record names the endpoint and the attempt (``endpoint``, ``detail``) belong to the route's API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from litestar.connection import ASGIConnection

from policies.policy import CONTROL_ACTIONS

__all__ = ["Connection", "Permission", "method_and_path"]

Connection = ASGIConnection[Any, Any, Any, Any]


def _path(connection: Connection) -> str:
    return connection.url.path


def method_and_path(connection: Connection) -> str:
    return f"{connection.scope.get('method', '')} {connection.url.path}"


def _nothing(_: Connection) -> str:
    return ""


@dataclass(frozen=True)
class Permission:
    """Every one of ``actions`` (control-plane actions) is needed."""

    actions: tuple[str, ...]
    refusal: Callable[[], Exception]
    """The 403 to answer (each API keeps its own words)."""
    domain: Callable[[Connection], str | None] | None = None
    """The domain the request concerns (``*``: all of them); None: wherever the caller holds it."""
    endpoint: Callable[[Connection], str] = field(default=_path)
    """How the audit record names the endpoint."""
    detail: Callable[[Connection], str] = field(default=_nothing)
    """What the audit record says was attempted."""

    def __post_init__(self) -> None:
        unknown = [a for a in self.actions if a not in CONTROL_ACTIONS]
        if not self.actions or unknown:
            raise ValueError(f"a permission needs control-plane actions, got {self.actions!r}")
