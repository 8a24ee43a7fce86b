"""Everything a gateway process holds for its lifetime, built once from the settings."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from audit.log import AuditLog
from audit.writer_socket import WriterSocket
from engine.serving.client import EngineClient
from filters import FilterPipeline
from gateway.auditor import Auditor
from gateway.auth import TokenVerifier
from gateway.authenticator import Authenticator
from gateway.embedding_service import EmbeddingService
from gateway.engine_pool import EnginePool, Heartbeat, ProcessProbe
from gateway.errors import ConfigError
from gateway.inference import InferenceService
from gateway.metrics_access import MetricsAccess
from gateway.quota import Quotas
from gateway.redis_pipe import RedisPipe
from gateway.settings import GatewaySettings
from gateway.telemetry import Telemetry
from gateway.tls_context import engine_client_context
from policies import Authorizer, PolicyTamperedError
from policies.policy_seal import PolicySeal, tamper_event

__all__ = ["Services", "open_authorizer"]

_REDIS_PROBE_TIMEOUT_S = 0.5
"""A readiness probe answers within this even when Redis hangs."""


# Fail fast: a dead Redis must turn into a quick, fail-closed answer, not a stalled request.
# The client and the pipe of the per-request commands share these.
_REDIS_CONNECT_TIMEOUT_S = 0.5
_REDIS_REPLY_TIMEOUT_S = 1.0


def _redis_client(url: str) -> Redis:
    return Redis.from_url(
        url,
        socket_connect_timeout=_REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=_REDIS_REPLY_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=10,
    )


def _redis_pipe(url: str) -> RedisPipe | None:
    return RedisPipe.from_url(
        url, connect_timeout_s=_REDIS_CONNECT_TIMEOUT_S, timeout_s=_REDIS_REPLY_TIMEOUT_S
    )


async def open_authorizer(settings: GatewaySettings, audit_log: AuditLog, redis: Redis | None) -> Authorizer:
    """The policy, sealed with the audit signing key; a store that fails its seal stops start-up
    (there is no verified policy to serve) and the refusal is audited."""
    try:
        return Authorizer.open(
            settings.access,
            settings.data_path,
            redis=redis,
            seal=PolicySeal(audit_log.signer),
            audit=audit_log,
        )
    except PolicyTamperedError as exc:
        await audit_log.append(tamper_event(exc, action="gateway refused to start"))
        await audit_log.close()
        raise


class Services:
    """A plain class, not a dataclass: litestar passes it through DI without validating it."""

    def __init__(
        self,
        *,
        settings: GatewaySettings,
        telemetry: Telemetry,
        redis: Redis | None,
        audit_log: AuditLog,
        verifier: TokenVerifier,
        authorizer: Authorizer,
        quotas: Quotas,
        filters: FilterPipeline,
        engines: EnginePool,
        inference: InferenceService,
        authenticator: Authenticator,
        writer_socket: WriterSocket | None = None,
        redis_pipe: RedisPipe | None = None,
    ) -> None:
        """``redis_pipe``: the connection of the per-request Redis commands (revocation lookup,
        quota reserve and release), where the URL allows one; ``redis`` serves the rest."""
        self.settings = settings
        self.telemetry = telemetry
        self.redis = redis
        self.audit_log = audit_log
        self.verifier = verifier
        self.authorizer = authorizer
        self.quotas = quotas
        self.filters = filters
        self.engines = engines
        self.inference = inference
        self.embeddings = EmbeddingService(
            inference, allow_token_id_inputs=settings.server.allow_token_id_prompts
        )
        self.authenticator = authenticator
        self.writer_socket = writer_socket
        self.redis_pipe = redis_pipe

    @classmethod
    async def create(
        cls,
        settings: GatewaySettings,
        engine_urls: tuple[str, ...] | None = None,
        *,
        is_process_alive: ProcessProbe | None = None,
        audit_feed: Path | None = None,
        records_engine_events: bool = True,
    ) -> Services:
        """Open every component; ``engine_urls`` overrides the configured pool (local engine), whose
        supervisor answers ``is_process_alive``. A gateway worker (``strongroom.gateway_workers``)
        appends through its supervisor's ``audit_feed`` instead of writing the log itself, and only
        one worker copies the engines' key operations into the log (``records_engine_events``)."""
        data_dir = settings.data_path
        telemetry = Telemetry.install(settings.telemetry)
        redis = _redis_client(settings.redis_url) if settings.redis_url else None
        pipe = _redis_pipe(settings.redis_url) if settings.redis_url else None
        token = os.environ.get(settings.server.engine_token_env, "")
        urls = engine_urls if engine_urls is not None else settings.server.engine_urls
        if not urls:
            raise ConfigError("no engine: set server.engine_urls or run `strongroom serve`, which starts one")
        if not token:
            raise ConfigError(f"${settings.server.engine_token_env} must hold the engine token")
        metrics_access = MetricsAccess(settings.telemetry, settings.server, os.environ)
        if audit_feed is not None:
            audit_log = await AuditLog.join(settings.audit, data_dir, audit_feed)
        else:
            audit_log = await AuditLog.open(settings.audit, data_dir)
        writer_socket = None
        if settings.audit.backend == "sqlite" and audit_feed is None:
            # Operator commands beside this gateway append through it: it holds the writer lock.
            db_path = settings.audit.resolve(data_dir, settings.audit.sqlite_path)
            writer_socket = await WriterSocket.start(audit_log, db_path, data_dir)
        verifier = TokenVerifier.create(settings.auth, data_dir, redis=pipe or redis)
        authorizer = await open_authorizer(settings, audit_log, redis)
        await authorizer.start()
        quotas = Quotas(settings.quota, redis=redis, per_request=pipe)
        filters = FilterPipeline.from_config(settings.filters, data_dir)
        is_tls = any(url.startswith("https://") for url in urls)
        engine_tls = engine_client_context(settings.server.engine_tls, settings.resolve) if is_tls else None
        clients = [
            EngineClient(
                url,
                token,
                connect_timeout_s=settings.server.engine_connect_timeout_s,
                read_timeout_s=settings.server.request_timeout_s,
                ssl_context=engine_tls,
            )
            for url in urls
        ]
        server = settings.server
        engines = EnginePool(
            clients,
            refresh_s=server.engine_refresh_s,
            heartbeat=Heartbeat(
                interval_s=server.engine_heartbeat_s,
                timeout_s=server.engine_heartbeat_timeout_s,
                misses=server.engine_heartbeat_misses,
            ),
            is_process_alive=is_process_alive,
            audit=audit_log if records_engine_events else None,
        )
        await engines.start()
        telemetry.count_in_flight(engines.num_in_flight)
        telemetry.serving.watch_engines(engines.engine_stats)
        auditor = Auditor(audit_log, telemetry.serving.stages)
        inference = InferenceService(
            authorizer=authorizer,
            quotas=quotas,
            filters=filters,
            auditor=auditor,
            engines=engines,
            telemetry=telemetry,
            allow_token_id_prompts=settings.server.allow_token_id_prompts,
        )
        return cls(
            settings=settings,
            telemetry=telemetry,
            redis=redis,
            audit_log=audit_log,
            verifier=verifier,
            authorizer=authorizer,
            quotas=quotas,
            filters=filters,
            engines=engines,
            inference=inference,
            authenticator=Authenticator(verifier, metrics_access, auditor, telemetry.serving.stages),
            writer_socket=writer_socket,
            redis_pipe=pipe,
        )

    async def readiness(self) -> dict[str, bool | None]:
        """What a load balancer needs: the engine, the audit store and Redis (None: not configured)."""
        redis_ok: bool | None = None
        if self.redis is not None:
            try:
                redis_ok = bool(await asyncio.wait_for(self.redis.ping(), _REDIS_PROBE_TIMEOUT_S))
            except (TimeoutError, RedisError, OSError):
                redis_ok = False
        return {
            "engine": self.engines.is_ready,
            "audit": not self.audit_log.problem(),
            "redis": redis_ok,
        }

    async def aclose(self) -> None:
        await self.engines.aclose()
        await self.authorizer.stop()
        await self.verifier.aclose()
        await self.quotas.aclose()
        if self.writer_socket is not None:
            await self.writer_socket.close()
        await self.audit_log.close()
        if self.redis_pipe is not None:
            await self.redis_pipe.aclose()
        if self.redis is not None:
            await self.redis.aclose()
