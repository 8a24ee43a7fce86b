"""The quota package's errors. Both are GatewayErrors, so the gateway's one mapping renders them."""

from __future__ import annotations

import math

from gateway.auth.errors import RETRY_AFTER_S
from gateway.errors import GatewayError

__all__ = ["MaxTokensCeilingError", "QuotaError", "QuotaExceededError", "QuotaUnavailableError"]


class QuotaError(GatewayError):
    """Base of every quota error."""


class QuotaExceededError(QuotaError):
    """A limit refuses the request (429). ``retryable`` False means waiting cannot help (the request
    alone exceeds a limit), so the gateway sends ``x-should-retry: false``."""

    status_code = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        retry_after_s: float,
        retryable: bool,
        rate_headers: dict[str, str] | None = None,
        param: str | None = None,
        limit_value: int | None = None,
        remaining: int | None = None,
        reset_s: float | None = None,
    ) -> None:
        headers = dict(rate_headers or {})
        if retryable:
            headers["retry-after"] = str(max(1, math.ceil(retry_after_s)))
        else:
            headers["x-should-retry"] = "false"
        super().__init__(message, param=param, headers=headers)
        self.limit = limit
        """Which limit refused: requests, tokens, concurrency or max_tokens."""
        self.retry_after_s = retry_after_s
        self.retryable = retryable
        self.limit_value = limit_value
        """The configured value of that limit."""
        self.remaining = remaining
        """What is left of it in the current window (None for max_tokens)."""
        self.reset_s = reset_s
        """Seconds until the window resets (None where no window applies)."""


class MaxTokensCeilingError(QuotaExceededError):
    """``max_tokens`` above the caller's ceiling: the request itself is invalid for this caller,
    so a 400 as OpenAI answers a ``max_tokens`` above a model's limit, not a 429 to retry."""

    status_code = 400
    type = "invalid_request_error"
    code = "invalid_value"


class QuotaUnavailableError(QuotaError):
    """The shared limiter (Redis) is unreachable and quotas fail closed."""

    status_code = 503
    type = "server_error"
    code = "quota_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"retry-after": RETRY_AFTER_S})
