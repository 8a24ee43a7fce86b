"""Everything a process needs beyond a config that parses: files, secrets, safe exposure, services.

``strongroom config check`` prints every problem, one line each; ``serve`` and ``engine`` run the
same checks before they start, so an operator learns all that is missing at once instead of one
failure per restart. Files that a process creates on its first start (dev keys, demo models, the
audit content keys) are not required; files it only reads are.

    role      checks
    serve     listener + exposure, auth, audit, filters, policies; + engine when no engine_urls
    engine    engine listener + exposure, engine token, keys, models

With ``connect`` the services are also reached: Redis (PING), the audit PostgreSQL and its witness.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from gateway.errors import ConfigError
from gateway.listener_config import TlsConfig
from strongroom.config import Settings

__all__ = ["ConfigCheck", "Problem", "Role"]

Role = Literal["serve", "engine"]

# Demo models `serve` writes on first start (engine/demo.py; not imported: it loads torch).
_DEMO_MODEL_NAMES = ("demo-chat", "demo-base", "demo-embed")
_CONNECT_TIMEOUT_S = 3
_RENEW_WITHIN = timedelta(days=14)
_CONTENT_KEY_BYTES = 32


class Problem(str):
    """One ``key: what is wrong`` line. A warning does not stop a start: the process runs degraded
    (a model out of service, /metrics refused) and says why."""

    is_warning: bool = False


class _Warning(Problem):
    is_warning = True


class ConfigCheck:
    """The problems of one settings object for one process role, as ``key: what is wrong`` lines."""

    def __init__(self, settings: Settings, role: Role, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.role = role
        self.environ = os.environ if environ is None else environ

    @property
    def runs_engine(self) -> bool:
        return self.role == "engine" or not self.settings.server.engine_urls

    def problems(self, *, connect: bool = False) -> list[Problem]:
        found = list(self._gateway()) if self.role == "serve" else []
        if self.runs_engine:
            found += self._engine()
        if connect and self.role == "serve":
            found += self._services()
        return [p if isinstance(p, Problem) else Problem(p) for p in found]

    def errors(self) -> list[Problem]:
        """The problems that must stop a start."""
        return [p for p in self.problems() if not p.is_warning]

    # -- helpers -------------------------------------------------------------------------------

    def _file(self, key: str, path: str | None) -> Iterator[str]:
        if path is None:
            return
        resolved = self.settings.resolve(path)
        if not resolved.is_file():
            yield f"{key}: file not found: {resolved}"
        elif not os.access(resolved, os.R_OK):
            yield f"{key}: not readable by this user: {resolved}"

    def _env(self, key: str, name: str | None, why: str) -> Iterator[str]:
        if name and not self.environ.get(name):
            yield f"{key}: environment variable ${name} is unset or empty ({why})"

    def _tls(self, key: str, tls: TlsConfig) -> Iterator[str]:
        from gateway.tls_context import listener_context

        missing = [
            *self._file(f"{key}.cert_file", tls.cert_file),
            *self._file(f"{key}.key_file", tls.key_file),
            *self._file(f"{key}.client_ca_file", tls.client_ca_file),
        ]
        yield from missing
        if tls.is_enabled and not missing:
            try:
                listener_context(tls, self.settings.resolve, key)
            except ConfigError as exc:
                yield str(exc)
                return
            yield from self._validity(f"{key}.cert_file", tls.cert_file)

    def _validity(self, key: str, path: str | None) -> Iterator[str]:
        """An expired (or not yet valid) leaf certificate is an error; one expiring soon a warning."""
        if path is None:
            return
        from cryptography import x509

        try:
            cert = x509.load_pem_x509_certificate(self.settings.resolve(path).read_bytes())
        except ValueError:
            return  # a chain the TLS context accepted but this parser does not: left to the handshake
        now = datetime.now(UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            yield f"{key}: certificate valid only {cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d}"
        elif cert.not_valid_after_utc - now < _RENEW_WITHIN:
            yield _Warning(f"{key}: certificate expires {cert.not_valid_after_utc:%Y-%m-%d}; renew it")

    # -- the gateway (`serve`) -----------------------------------------------------------------

    def _gateway(self) -> Iterator[str]:
        from strongroom.listener import check_gateway_exposure

        s = self.settings
        try:
            check_gateway_exposure(s)
        except ConfigError as exc:
            yield f"server.host: {exc}"
        yield from self._tls("server.tls", s.server.tls)
        if s.grpc.enabled and s.grpc.port == s.server.port:
            yield f"grpc.port: {s.grpc.port} is server.port too; give the gRPC API a port of its own"
        if s.server.workers > 1 and s.redis_url is None:
            yield (
                f"server.workers: {s.server.workers} workers need redis_url: quotas would otherwise "
                "be counted by each worker apart (set workers = 1, or 0 for one per core with Redis)"
            )
        yield from self._engine_client()
        for i, issuer in enumerate(s.auth.issuers):
            for path in issuer.key_files:
                yield from self._file(f"auth.issuers.{i}.key_files", path)
            yield from self._env(f"auth.issuers.{i}.hmac_secret_env", issuer.hmac_secret_env, "HMAC secret")
        if not s.auth.dev_issuer and not s.auth.issuers:
            yield _Warning("auth: no [[auth.issuers]] and the dev issuer is off: every request is refused")
        yield from self._audit()
        yield from self._file("filters.policy_file", s.filters.policy_file)
        for path in s.filters.keyword_files:
            yield from self._file("filters.keyword_files", path)
        yield from self._file("access.seed_policy", s.access.seed_policy)
        telemetry = s.telemetry
        if not s.server.is_loopback and not telemetry.metrics_public:
            for text in self._env(
                "telemetry.metrics_token_env", telemetry.metrics_token_env, "/metrics is refused without it"
            ):
                yield _Warning(text)

    def _engine_client(self) -> Iterator[str]:
        server = self.settings.server
        if not server.engine_urls:
            return
        yield from self._env(
            "server.engine_token_env", server.engine_token_env, "remote engines need the token"
        )
        if not any(url.startswith("https://") for url in server.engine_urls):
            return
        tls = server.engine_tls
        missing = [
            *self._file("server.engine_tls.ca_file", tls.ca_file),
            *self._file("server.engine_tls.cert_file", tls.cert_file),
            *self._file("server.engine_tls.key_file", tls.key_file),
        ]
        yield from missing
        if tls.cert_file is None:
            yield _Warning("server.engine_tls.cert_file: unset; engines off loopback require mutual TLS")
        elif not missing:
            from gateway.tls_context import engine_client_context

            try:
                engine_client_context(tls, self.settings.resolve)
            except ConfigError as exc:
                yield str(exc)
                return
            yield from self._validity("server.engine_tls.cert_file", tls.cert_file)

    def _audit(self) -> Iterator[str]:
        audit = self.settings.audit
        if audit.signing_key_provider == "pkcs11":
            yield from self._pkcs11(
                "audit.signing_pkcs11", audit.signing_pkcs11_module, audit.signing_pkcs11_pin_env
            )
        elif not audit.create_signing_key:
            yield from self._file("audit.signing_key_file", audit.signing_key_file)
        if audit.public_key_file is not None:
            yield from self._file("audit.public_key_file", audit.public_key_file)
        for key, path in (
            ("audit.content_hmac_key_file", audit.content_hmac_key_file),
            ("audit.content_key_file", audit.content_key_file),
        ):
            resolved = self.settings.resolve(path)  # created on first use when missing
            if resolved.is_file() and resolved.stat().st_size != _CONTENT_KEY_BYTES:
                yield f"{key}: {resolved} must hold exactly {_CONTENT_KEY_BYTES} bytes"
        shared = self.settings.redis_url is not None and not self.settings.server.is_loopback
        if shared and audit.backend == "sqlite":
            yield _Warning("audit.backend: replicas sharing Redis need the postgres backend, not sqlite")
        if shared and audit.backend == "postgres" and self.settings.access.backend == "sqlite":
            yield _Warning(
                "access.backend: gateways sharing a PostgreSQL audit log need the postgres policy store"
            )

    # -- the engine ----------------------------------------------------------------------------

    def _engine(self) -> Iterator[str]:
        s = self.settings
        if self.role == "engine":
            from strongroom.listener import check_engine_exposure

            cfg = s.engine_listener
            try:
                check_engine_exposure(cfg.host, cfg.tls)
            except ConfigError as exc:
                yield f"engine_listener.host: {exc}"
            yield from self._tls("engine_listener.tls", cfg.tls)
            yield from self._env(
                "server.engine_token_env", s.server.engine_token_env, "the engine refuses to start without it"
            )
        yield from self._keys()
        for i, spec in enumerate(s.engine.models):
            if self._is_demo(spec.name, spec.path):
                continue
            path = s.resolve(spec.path)
            if not (path / "config.json").is_file() and not (path / "manifest.json").is_file():
                yield _Warning(
                    f"engine.models.{i} ({spec.name}): out of service: no checkpoint (config.json) or sealed model (manifest.json) in {path}"
                )

    def _is_demo(self, name: str, path: str) -> bool:
        return name in _DEMO_MODEL_NAMES and path == f"models/{name}"

    def _needs_master_key(self) -> bool:
        s = self.settings
        return s.keys.require_sealed and any(not self._is_demo(m.name, m.path) for m in s.engine.models)

    def _keys(self) -> Iterator[str]:
        keys = self.settings.keys
        if keys.provider == "pkcs11":
            yield from self._pkcs11("keys.pkcs11", keys.pkcs11_module, keys.pkcs11_pin_env)
            return
        if self._needs_master_key():
            yield from self._file("keys.key_file", keys.key_file)
        yield from self._env("keys.passphrase_env", keys.passphrase_env, "the key file's passphrase")

    def _pkcs11(self, prefix: str, module: str, pin_env: str | None) -> Iterator[str]:
        if not Path(module).is_file():
            yield f"{prefix}_module: PKCS#11 module not found: {module}"
        yield from self._env(f"{prefix}_pin_env", pin_env, "the HSM user PIN")

    # -- services (--connect) ------------------------------------------------------------------

    def _services(self) -> Iterator[str]:
        s = self.settings
        if s.redis_url is not None:
            import redis

            try:
                client = redis.Redis.from_url(s.redis_url, socket_connect_timeout=_CONNECT_TIMEOUT_S)
                client.ping()
                client.close()
            except redis.RedisError as exc:
                yield f"redis_url: cannot reach Redis: {type(exc).__name__}: {exc}"
        audit = s.audit
        dsns = {"audit.witness_postgres_dsn": audit.witness_postgres_dsn}
        if audit.backend == "postgres":
            dsns["audit.postgres_dsn"] = audit.postgres_dsn
        if s.access.backend == "postgres":
            dsns["access.postgres_dsn"] = s.access.postgres_dsn
        for key, dsn in dsns.items():
            if dsn is None:
                continue
            import psycopg

            try:
                psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_S).close()
            except psycopg.Error as exc:
                # The first line of libpq's message names host and user, never the password.
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                yield f"{key}: cannot reach PostgreSQL: {first}"
