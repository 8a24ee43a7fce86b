"""What the gateway knows about one request while it handles it. Holds no prompt text."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from gateway.auth.principal import Principal

__all__ = ["RequestContext", "new_request_id"]


def new_request_id() -> str:
    return f"req_{secrets.token_hex(16)}"


@dataclass
class RequestContext:
    """Mutable per-request state, filled in as the pipeline advances."""

    request_id: str
    endpoint: str
    client_ip: str = ""
    trace_id: str = ""
    started: float = field(default_factory=time.perf_counter)
    principal: Principal | None = None
    model: str = ""
    engine_instance: str = ""

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0
