"""One engine instance as a process: load the configured models, serve ``engine.serving.protocol``.

``serve`` starts it on a socket it bound itself (passed by file descriptor, so there is no
port race); ``strongroom engine --port`` starts it standalone for a remote pool. A model that
fails to load (missing file, bad seal, refused plaintext) stays out of service with its
reason; the others serve.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from typing import Any, NamedTuple

import msgspec

from common.audit_event import AuditEvent
from engine.config import EngineConfig
from engine.loading.model_source import ModelSource
from engine.loading.source_opener import OpenedSources
from engine.serving.backend import EngineBackend
from engine.serving.protocol import KeyOperationEvent
from keys.config import KeysConfig
from keys.key_audit import KeyOperation
from strongroom.config import Settings

log = logging.getLogger("strongroom.engine")

__all__ = [
    "KeyOperationLog",
    "KeyProviderOpener",
    "build_backend",
    "end_with_parent",
    "ensure_demo_models",
    "model_sources",
    "run_engine",
    "run_engine_rank",
]


def _provider(settings: Settings, *, create: bool) -> Any:
    """The configured key provider; in dev (file provider, no key yet) one is created on first start."""
    from keys import KeyFileProvider, build_provider, key_file_path

    cfg = settings.keys
    path = key_file_path(cfg, settings.data_path)
    if cfg.provider == "file" and not path.exists():
        if not create:
            return None
        log.warning(
            "no master key at %s: creating a development key file (run `strongroom keys init` in production)",
            path,
        )
        return KeyFileProvider.create(path)
    return build_provider(cfg, settings.data_path)


def ensure_demo_models(settings: Settings) -> None:
    """Write the built-in demo models on first start, sealed unless sealing is turned off.

    The files are built in memory and sealed from there: no plaintext demo weights touch the disk.
    """
    from engine.loading.demo import DEMO_MODELS, build_demo_files

    for spec in settings.engine.models:
        if spec.name not in DEMO_MODELS or spec.path != f"models/{spec.name}":
            continue
        dst = settings.resolve(spec.path)
        if (dst / "config.json").exists() or (dst / "manifest.json").exists():
            continue
        files = build_demo_files(spec.name)
        if settings.keys.require_sealed:
            from keys import seal_model, seal_registry

            provider = _provider(settings, create=True)
            registry = seal_registry(settings.keys, settings.data_path, provider)
            seal_model(
                files,
                dst,
                model_id=spec.name,
                provider=provider,
                registry=registry,
                sealed_by="serve: demo model",
            )
        else:
            dst.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                (dst / name).write_bytes(data)
        log.info("wrote demo model %s to %s", spec.name, dst)


def model_sources(
    settings: Settings, key_operations: list[KeyOperationEvent]
) -> tuple[dict[str, ModelSource], dict[str, str]]:
    """Each configured model's source (sealed ones opened through the key provider, plaintext
    ones refused where ``keys.require_sealed``), and why the others are out of service."""
    from keys import ModelKeyError, key_file_path, model_source, seal_registry

    sources: dict[str, ModelSource] = {}
    failed: dict[str, str] = {}
    unavailable = f"no master key at {key_file_path(settings.keys, settings.data_path)}"
    try:
        provider = _provider(settings, create=False)
    except Exception as exc:  # HSM down, bad passphrase: sealed models fail, plaintext ones may serve
        provider = None
        unavailable = f"key provider unavailable: {exc}"
        log.error("%s", unavailable)
    registry = seal_registry(settings.keys, settings.data_path, provider) if provider is not None else None
    for spec in settings.engine.models:
        try:
            sources[spec.name] = model_source(
                settings.resolve(spec.path),
                settings.keys,
                provider,
                audit=KeyOperationLog(key_operations),
                process=f"engine pid {os.getpid()}",
                sealed_as=spec.sealed_model_id or spec.name,
                registry=registry,
            )
        except Exception as exc:  # a bad model must not take the others down
            why = f" ({unavailable})" if provider is None and isinstance(exc, ModelKeyError) else ""
            failed[spec.name] = f"{type(exc).__name__}: {exc}{why}"
    for name, reason in failed.items():
        log.error("model %s is out of service: %s", name, reason)
    return sources, failed


class KeyProviderOpener(msgspec.Struct, frozen=True, kw_only=True):
    """The ``SourceOpener`` (``engine.loading.source_opener``) that rank 0 gives the ranks it
    spawns: each opens the models as ``model_sources`` does here, unwrapping the data key through
    the key provider itself. It is pickled to them, so it holds what opening needs and nothing
    else: not ``Settings``, whose database URLs may carry passwords, and no secret value (a
    passphrase or PIN is read from its environment variable when the provider opens)."""

    keys: KeysConfig
    data_dir: str
    """The data directory, resolved: configured paths are relative to it."""

    @classmethod
    def of(cls, settings: Settings) -> KeyProviderOpener:
        return cls(keys=settings.keys, data_dir=str(settings.data_path))

    def __call__(self, config: EngineConfig) -> OpenedSources:
        key_operations: list[KeyOperationEvent] = []
        settings = Settings(data_dir=self.data_dir, keys=self.keys, engine=config)
        sources, failed = model_sources(settings, key_operations)
        _log_key_operations(key_operations)
        return OpenedSources(sources, failed, [msgspec.to_builtins(op) for op in key_operations])


def _log_key_operations(key_operations: list[KeyOperationEvent]) -> None:
    for op in key_operations:
        log.info(
            "key operation %s of model %s: key %s v%s (%s)%s",
            op.operation,
            op.model,
            op.key_id,
            op.key_version,
            op.provider,
            f", failed: {op.error}" if op.error else "",
        )


class KeyOperationLog:
    """The engine process's ``AuditSink``. It keeps no audit log of its own: the key operations of
    opening its models (KEY_OPERATION events from ``keys``) become ``EngineInfo.key_operations``,
    and the gateway's engine pool writes each into its log, the same record ``keys`` made."""

    def __init__(self, operations: list[KeyOperationEvent]) -> None:
        self._operations = operations

    async def append(self, event: AuditEvent, *, served: bool = False) -> int:
        operation = KeyOperation.of(event)
        self._operations.append(
            KeyOperationEvent(
                operation=operation.operation,
                key_id=operation.key_id,
                key_version=operation.key_version,
                model=operation.model,
                process=operation.process,
                provider=operation.provider,
                error=event.reason,
            )
        )
        return len(self._operations)


class LoadedEngine(NamedTuple):
    engine: EngineBackend
    """The real ``AsyncEngine`` or the ``StubEngine``: mypy holds both to the server's seam here."""
    failed: dict[str, str]
    """Model name -> why it is out of service."""
    key_operations: list[KeyOperationEvent]
    manifests: dict[str, str]
    """Model name -> SHA-256 of its sealed manifest (absent for plaintext models)."""


def build_backend(settings: Settings, *, stub: bool = False) -> LoadedEngine:
    key_operations: list[KeyOperationEvent] = []
    if stub:
        from engine.serving.stub_engine import StubEngine

        models = settings.engine.models
        stub_engine = StubEngine(
            tuple(m.name for m in models if m.kind != "embedding"),
            embedding_models=tuple(m.name for m in models if m.kind == "embedding"),
        )
        return LoadedEngine(stub_engine, {}, key_operations, {})
    ensure_demo_models(settings)
    sources, failed = model_sources(settings, key_operations)
    manifests = {name: str(getattr(s, "manifest_sha256", "")) for name, s in sources.items()}
    manifests = {name: digest for name, digest in manifests.items() if digest}
    from engine import AsyncEngine

    models = tuple(m for m in settings.engine.models if m.name in sources)
    if not models:
        from engine.serving.stub_engine import StubEngine

        # Nothing loadable: serve no model rather than crash, so /readyz explains why.
        return LoadedEngine(StubEngine(()), failed, key_operations, {})

    config = msgspec.structs.replace(settings.engine, models=models)
    engine = AsyncEngine(
        config,
        data_dir=settings.data_path,
        sources=sources,
        skip_failed_models=True,
        on_fatal=_exit_for_restart,
        source_opener=KeyProviderOpener.of(settings),
    )
    return LoadedEngine(engine, failed, key_operations, manifests)


def _exit_for_restart(exc: Exception) -> None:
    """A tensor-parallel rank failed: shut down (SIGTERM to ourselves, so streams close and the
    other ranks stop) and let the supervisor start a new instance."""
    log.critical("engine instance stopping for a restart: %s", exc)
    os.kill(os.getpid(), signal.SIGTERM)


def end_with_parent() -> None:
    """A supervised engine or gateway worker (started by ``serve``) gets SIGTERM when its parent
    dies, however it dies (SIGKILL, a crash): an orphaned engine would keep the GPU's memory, an
    orphaned worker the port. Linux only."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("could not ask for SIGTERM on the gateway's exit (errno %d)", ctypes.get_errno())
    if os.getppid() == 1:  # the gateway was already gone before the request took effect
        raise SystemExit("the gateway that started this engine has exited")


def run_engine(settings: Settings, *, fd: int | None, host: str, port: int, stub: bool = False) -> None:
    """Serve until stopped. With ``fd`` (started by ``serve``) on the supervisor's loopback socket in
    plain HTTP; otherwise on host:port, refusing an address off loopback without mutual TLS."""
    from engine.serving.server import EngineServer
    from gateway.listener_config import TlsConfig
    from strongroom.listener import Listener, check_engine_exposure

    cfg = settings.engine_listener
    token = os.environ.get(settings.server.engine_token_env, "")
    if not token:
        raise SystemExit(f"${settings.server.engine_token_env} must hold the engine token")
    if fd is None:
        check_engine_exposure(host, cfg.tls)
    tls = cfg.tls if fd is None else TlsConfig()
    listener = Listener(tls, cfg.limits, resolve=settings.resolve, where="engine_listener")
    if fd is not None:
        end_with_parent()
    backend = build_backend(settings, stub=stub)
    server = EngineServer(
        backend.engine,
        token,
        failed_models=backend.failed,
        key_operations=backend.key_operations,
        manifests=backend.manifests,
    )
    sock = socket.socket(fileno=fd) if fd is not None else None
    listener.serve(server.app(), host=host, port=port, sock=sock)


def run_engine_rank(settings: Settings) -> None:
    """Serve as one rank (not 0) of an engine whose rank 0 runs on another host (torchrun's
    environment variables, ``engine.worker.rank_environment``). The models open as rank 0's do,
    through the same sealing rules; one that does not open here fails rank 0's start."""
    from engine.worker.rank_environment import RankEnvironment
    from engine.worker.rank_worker import run_rank

    env = RankEnvironment.from_environ(os.environ)
    env.check(settings.engine)
    from engine.errors import EngineConfigError

    # Each rank unwraps the data key itself, as a spawned one does; its key operations go to its
    # log and to rank 0, whose EngineInfo carries them to the gateway's audit log.
    opened = KeyProviderOpener.of(settings)(settings.engine)
    models = tuple(m for m in settings.engine.models if m.name in opened.sources)
    if not models:  # (a config without models would fall back to reading the plain directories)
        raise EngineConfigError(f"no model opens on this rank: {opened.failed}")
    config = msgspec.structs.replace(settings.engine, models=models)
    log.info("engine rank %d of %d joining %s", env.rank, env.world_size, env.address)
    run_rank(
        env.rank,
        config,
        str(settings.data_path),
        dict(opened.sources),
        env.address,
        env.local_rank,
        opened.key_operations,
    )
