"""The policies package's errors; each carries the HTTP status and OpenAI-style code the gateway maps."""

from __future__ import annotations

__all__ = [
    "InvalidPolicyError",
    "PolicyConflictError",
    "PolicyError",
    "PolicyForbiddenError",
    "PolicyNotFoundError",
    "PolicyTamperedError",
    "PolicyUnavailableError",
]


class PolicyError(Exception):
    """Base of every policies error."""

    status_code: int = 500
    code: str = "policy_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidPolicyError(PolicyError):
    """A rule, name, pattern or action is malformed; the message says which and why."""

    status_code = 400
    code = "invalid_policy"


class PolicyForbiddenError(PolicyError):
    """The caller lacks the control-plane permission this operation needs."""

    status_code = 403
    code = "permission_denied"


class PolicyNotFoundError(PolicyError):
    """Removing a grant or assignment that does not exist."""

    status_code = 404
    code = "not_found"


class PolicyConflictError(PolicyError):
    """Adding a grant or assignment that already exists."""

    status_code = 409
    code = "already_exists"


class PolicyUnavailableError(PolicyError):
    """The policy store could not be read or written; callers fail closed."""

    status_code = 503
    code = "policy_unavailable"


class PolicyTamperedError(PolicyUnavailableError):
    """The stored policy does not match its seal: it was edited outside the API/CLI. Opaque to
    clients (503 like any unavailable store); the audit record carries the detail."""
