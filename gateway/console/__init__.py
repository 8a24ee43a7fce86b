"""The web console under ``/console``: sign-in, sessions, and the compliance officer's pages."""

from gateway.console.config import ConsoleConfig

__all__ = ["ConsoleConfig"]
