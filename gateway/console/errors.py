"""The console's refusals; ``console_error_response`` turns them (and litestar's) into HTML pages."""

from __future__ import annotations

__all__ = [
    "ConsoleError",
    "CsrfError",
    "NotSignedInError",
    "PageForbiddenError",
    "PageNotFoundError",
    "RotationNotConfirmedError",
    "SessionsUnavailableError",
]


class ConsoleError(Exception):
    status_code = 400
    title = "Bad request"


class NotSignedInError(ConsoleError):
    """No live session: the browser is sent to the sign-in page."""

    status_code = 303
    title = "Sign in"


class PageForbiddenError(ConsoleError):
    status_code = 403
    title = "Not allowed"


class CsrfError(ConsoleError):
    status_code = 403
    title = "Form expired"


class PageNotFoundError(ConsoleError):
    status_code = 404
    title = "Not found"


class SessionsUnavailableError(ConsoleError):
    """The shared session store cannot be reached: nobody is let in until it can (fail closed)."""

    status_code = 503
    title = "Unavailable"


class RotationNotConfirmedError(ConsoleError):
    """The typed key version is not the current one: nothing was rotated."""

    title = "Not confirmed"
