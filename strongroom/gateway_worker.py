"""One gateway worker process (``strongroom worker``, started by ``serve``; see ``gateway_workers``).

The full gateway on the listening socket its supervisor passed down, appending to the audit log
through the supervisor's feed. It ends with its supervisor (``end_with_parent``), and writes its
ready file once its services are up, which is how the supervisor knows the start succeeded.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from strongroom.config import Settings

__all__ = ["num_workers", "run_worker"]


def num_workers(settings: Settings) -> int:
    """``server.workers``, with 0 resolved: one per core with Redis, else one."""
    configured = settings.server.workers
    if configured:
        return configured
    return (os.cpu_count() or 1) if settings.redis_url else 1


def run_worker(
    settings: Settings, *, fd: int, index: int, run_dir: Path, engine_urls: tuple[str, ...]
) -> None:
    from gateway.app import build_app
    from gateway.services import Services
    from gateway.telemetry import Telemetry
    from strongroom.engine_process import end_with_parent
    from strongroom.gateway_workers import engine_down_path, ready_path
    from strongroom.listener import Listener

    end_with_parent()
    server = settings.server
    listener = Listener(server.tls, server.limits, resolve=settings.resolve, where="server")
    telemetry = Telemetry.install(settings.telemetry)
    metrics = telemetry.identify_worker(index, run_dir)
    down = engine_down_path(run_dir)

    def is_process_alive(url: str) -> bool:
        return url not in engine_urls or not down.exists()

    async def services() -> Services:
        created = await Services.create(
            settings,
            engine_urls or None,
            is_process_alive=is_process_alive if engine_urls else None,
            audit_feed=run_dir / "audit.sock",
            records_engine_events=index == 0,
        )
        metrics.start_publishing()
        ready_path(run_dir, index).write_text(f"{os.getpid()}\n")
        return created

    app = build_app(services, telemetry, max_body_bytes=server.max_body_bytes, grpc_shares_port=True)
    sock = socket.socket(fileno=fd)
    listener.serve(app, host=server.host, port=server.port, sock=sock, drain_s=server.drain_s)
